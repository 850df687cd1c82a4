"""An image's dominant colours, each named by the nearest of a few named colours."""

from __future__ import annotations

from typing import cast

from PIL import Image

from knowledgeops.contracts.vision import Colour

# Named colours a dominant colour is described by (the nearest one).
_NAMED = {
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "silver": (192, 192, 192),
    "red": (220, 30, 30),
    "orange": (245, 140, 20),
    "yellow": (245, 220, 40),
    "green": (40, 160, 60),
    "olive": (128, 128, 0),
    "teal": (0, 128, 128),
    "cyan": (40, 200, 220),
    "blue": (30, 80, 220),
    "navy": (0, 0, 128),
    "purple": (128, 50, 160),
    "pink": (240, 130, 180),
    "brown": (130, 80, 40),
    "beige": (225, 210, 170),
}


def dominant_colours(image: Image.Image, k: int = 5) -> list[Colour]:
    """The `k` most common colours after median-cut quantisation of a 128-pixel sample."""
    small = image.convert("RGB")
    # Nearest-pixel sampling: smoothing would invent blended colours the image does not have.
    small.thumbnail((128, 128), Image.Resampling.NEAREST)
    quantised = small.quantize(colors=k, method=Image.Quantize.MEDIANCUT)
    palette = quantised.getpalette() or []
    counts = sorted(quantised.getcolors() or [], reverse=True)
    total = sum(n for n, _ in counts) or 1
    colours = []
    for n, index in counts[:k]:
        at = 3 * cast(int, index)  # a palette image's colours are palette indexes
        r, g, b = palette[at : at + 3]
        colours.append(
            Colour(hex=f"#{r:02x}{g:02x}{b:02x}", name=_name(r, g, b), share=round(n / total, 3))
        )
    return colours


def _name(r: int, g: int, b: int) -> str:
    return min(
        _NAMED, key=lambda n: sum((a - c) ** 2 for a, c in zip(_NAMED[n], (r, g, b), strict=True))
    )
