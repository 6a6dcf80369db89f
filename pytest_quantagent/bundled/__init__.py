"""The bundled CPU model's runtime format: its tokenizer, chat template and tool-call
parser, its architecture, and the checkpoints in ``models/``. Backends may import it;
it imports only the vocabulary and ``errors``."""
