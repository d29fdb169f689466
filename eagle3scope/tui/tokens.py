"""Optional: decode token ids with the target's tokenizer so the draft view shows text.

Only a local ``tokenizer.json`` in the model directory named by the publisher's ``hello`` is
used (``tokenizers`` if installed, else ``transformers``); nothing is fetched from a hub. When
neither loads, the draft view shows ids.
"""

from __future__ import annotations

from pathlib import Path


class Decoder:
    def __init__(self, tokenizer) -> None:
        self._tok = tokenizer
        self._cache: dict[int, str] = {}

    def pieces(self, ids: list[int]) -> list[str]:
        """One printable piece per id (whitespace made visible, so tokens stay distinguishable)."""
        out = []
        for i in ids:
            piece = self._cache.get(i)
            if piece is None:
                try:
                    piece = self._tok.decode([i])
                except Exception:
                    piece = f"<{i}>"
                piece = piece.replace("\n", "⏎").replace("\t", "⇥").replace(" ", "·") or f"<{i}>"
                if len(self._cache) < 200_000:
                    self._cache[i] = piece
            out.append(piece)
        return out


def load_decoder(model_path: str | None) -> Decoder | None:
    """A decoder for ``model_path``'s tokenizer.json, or None when it cannot be loaded locally."""
    if not model_path:
        return None
    path = Path(model_path) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer

        return Decoder(Tokenizer.from_file(str(path)))
    except Exception:
        pass
    try:
        from transformers import PreTrainedTokenizerFast

        return Decoder(PreTrainedTokenizerFast(tokenizer_file=str(path)))
    except Exception:
        return None
