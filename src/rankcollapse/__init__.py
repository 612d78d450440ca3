"""rankcollapse: rank collapse in deep self-attention, measured."""
__version__ = "0.1.0"
