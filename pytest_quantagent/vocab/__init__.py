"""The shared vocabulary: failure channels, termination reasons, τ²-compatible messages and
decisions. Every layer may import it; it imports nothing of the project."""
