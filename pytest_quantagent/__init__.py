"""pytest-quantagent: catch what quantization does to LLM agents before a checkpoint ships."""

__version__ = "0.1.0"
