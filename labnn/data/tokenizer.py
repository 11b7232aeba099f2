"""A character-level tokenizer: one id per distinct character of a corpus.

Dimension letters: `N` number of characters / ids.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


class CharTokenizer:
    """Maps each character of a fixed alphabet to an id (in sorted character order) and back.

    Args:
        chars: the alphabet, each character once.
    """

    def __init__(self, chars: Iterable[str]):
        self.chars = list(chars)
        if len(set(self.chars)) != len(self.chars) or any(len(c) != 1 for c in self.chars):
            raise ValueError("chars must be distinct single characters")
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        """The tokenizer of every distinct character in `text`, sorted."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Ids of `text`. Shape: `str` of length N -> `LongTensor [N]`."""
        try:
            return torch.tensor([self.index[c] for c in text], dtype=torch.long)
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in self.index)
            raise ValueError(
                f"character {text[pos]!r} at position {pos} of the text is not in the tokenizer's "
                f"alphabet of {self.vocab_size} characters"
            ) from None

    def decode(self, ids: torch.Tensor | Iterable[int]) -> str:
        """The text of `ids` (a 1-D tensor or a sequence of ints)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids must be 1-D, got shape {list(ids.shape)}")
            ids = ids.tolist()
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(f"id {bad[0]} is outside the vocabulary [0, {self.vocab_size})")
        return "".join(self.chars[i] for i in ids)
