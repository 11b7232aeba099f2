"""A character-level tokenizer: one id per distinct character of a corpus.

Dimension letters (the package legend): `N` characters of a text, or their ids.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterable

import torch

from labnn.nn.arguments import is_int


class CharTokenizer:
    """Maps each character of a fixed alphabet to an id (its place in the alphabet as
    given; `from_text` gives it sorted) and back.

    Args:
        chars: the alphabet, each character once.
    """

    def __init__(self, chars: Iterable[str]):
        """Id `i` for `chars[i]`: the alphabet must hold distinct single characters."""
        if isinstance(chars, (str, list, tuple)):
            self.chars = list(chars)
        else:
            raise TypeError(
                f"chars must be a str or a list of characters, got {type(chars).__name__}"
            )
        single = all(isinstance(c, str) and len(c) == 1 for c in self.chars)
        if not single or len(set(self.chars)) != len(self.chars):
            raise ValueError("chars must be distinct single characters")
        if not self.chars:
            raise ValueError("chars must hold at least one character")
        self.index = {c: i for i, c in enumerate(self.chars)}

    @classmethod
    def from_text(cls, text: str) -> "CharTokenizer":
        """The tokenizer of every distinct character in `text`, sorted."""
        return cls(sorted(set(text)))

    @property
    def vocab_size(self) -> int:
        """`V`, the number of characters."""
        return len(self.chars)

    def encode(self, text: str) -> torch.Tensor:
        """Ids of `text`. Shape: `str` of length N -> `LongTensor [N]`."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        try:
            return torch.tensor([self.index[c] for c in text], dtype=torch.long)
        except KeyError:
            pos = next(i for i, c in enumerate(text) if c not in self.index)
            raise ValueError(
                f"character {text[pos]!r} at position {pos} of the text is not in the "
                "tokenizer's "
                f"alphabet of {self.vocab_size} characters"
            ) from None

    def decode(self, ids: torch.Tensor | Iterable[int]) -> str:
        """The text of `ids` (a 1-D tensor or a sequence of ints)."""
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1:
                raise ValueError(f"ids must be 1-D, got shape {list(ids.shape)}")
            if ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
                raise TypeError(f"ids must hold integer ids, got dtype {ids.dtype}")
            ids = ids.tolist()
        if isinstance(ids, (str, bytes)):
            raise TypeError(
                "ids must be a 1-D tensor or a sequence of ints, got "
                f"{type(ids).__name__}"
            )
        ids = [int(i) if isinstance(i, numbers.Integral) and not isinstance(i, bool) else i
               for i in ids]  # NumPy's integers too
        wrong = [i for i in ids if not is_int(i)]
        if wrong:
            raise TypeError(
                f"ids must be ints, got {wrong[0]!r} ({type(wrong[0]).__name__})"
            )
        bad = [i for i in ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"id {bad[0]} is outside the vocabulary [0, {self.vocab_size})"
            )
        return "".join(self.chars[i] for i in ids)
