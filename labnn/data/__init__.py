"""Data: the Tiny Shakespeare corpus, a character tokenizer, batchers and synthetic tasks."""

from .batching import num_stream_batches, random_batch, random_batches, stream_batch, stream_batches, train_val_split
from .shakespeare import data_dir, load_tiny_shakespeare
from .synthetic import order_task
from .tokenizer import CharTokenizer

__all__ = [
    "CharTokenizer",
    "data_dir",
    "load_tiny_shakespeare",
    "num_stream_batches",
    "order_task",
    "random_batch",
    "random_batches",
    "stream_batch",
    "stream_batches",
    "train_val_split",
]
