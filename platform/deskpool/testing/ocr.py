"""Reading the text of a screen picture in tests, with tesseract (Debian's ``tesseract-ocr``).

The browser tests read what a remote screen shows from the pixels the browser drew: an xterm's
line, a VM console's banner. Pictures are enlarged twice in grey before reading (tesseract
misreads the small bitmap fonts of terminals at their own size). A missing tesseract is a
failing test that says what to install (``make x11``), never a skip.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import subprocess

from PIL import Image, ImageOps

__all__ = ["read_text"]

#: How much a picture is enlarged before tesseract reads it.
SCALE = 2


async def read_text(picture: Image.Image) -> str:
    """The text tesseract reads in ``picture`` (sparse text: ``--psm 11``).

    :raises AssertionError: tesseract is not installed, or failed.
    """
    if shutil.which("tesseract") is None:
        raise AssertionError(
            "tesseract is not installed: run `make x11` (scripts/ensure-x11.sh) "
            "or `sudo apt-get install tesseract-ocr tesseract-ocr-eng`"
        )
    grey = ImageOps.grayscale(picture)
    enlarged = grey.resize((grey.width * SCALE, grey.height * SCALE), Image.Resampling.LANCZOS)
    buffer = io.BytesIO()
    enlarged.save(buffer, "PNG")
    process = await asyncio.create_subprocess_exec(
        "tesseract", "stdin", "stdout", "--psm", "11",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out, err = await process.communicate(buffer.getvalue())
    assert process.returncode == 0, f"tesseract failed: {err.decode(errors='replace')}"
    return out.decode(errors="replace")
