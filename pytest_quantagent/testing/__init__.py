"""Test helpers shipped with the package (a loopback fault-injecting OpenAI server)."""
