"""The Messages API's limits on the images of one request, and the check
``analyze`` runs against a session's active chain.

Source: Anthropic's vision documentation
(https://platform.claude.com/docs/en/build-with-claude/vision, "General
limits"): at most 100 images per request on models with a 200k-token
context window (600 on the others; txdb checks the lower figure, since a
session may go back to such a model), each at most 8000x8000 px, and at
most 2000x2000 px once a request holds more than 20 images. A resumed
session sends every image of its active chain in each request.
"""

from __future__ import annotations

MAX_IMAGES = 100
MAX_PX = 8000
MANY_IMAGES = 20
MANY_IMAGES_MAX_PX = 2000


def limit_warnings(count: int, in_tool_results: int, largest_px: int | None) -> list[str]:
    """One line per limit the chain's images pass, with the command that fixes it.

    ``count``: images on the active chain; ``in_tool_results``: how many of
    them sit in tool results; ``largest_px``: the longest edge of the
    largest image (None when no size is known)."""
    if count == 0:
        return []
    fix = "txdb replace-images SESSION --dir TRANSCRIPTS (see txdb list-images SESSION)"
    if in_tool_results:
        fix += f", or txdb strip-tools SESSION for the {in_tool_results} inside tool results"
    out = []
    if count > MAX_IMAGES:
        out.append(f"{count} images on the active chain: past the API's {MAX_IMAGES} images per request; "
                   f"every resumed request will be refused. Fix: {fix}")
    if largest_px is not None and largest_px > MAX_PX:
        out.append(f"an image is {largest_px} px on its long edge: past the API's {MAX_PX} px limit. Fix: {fix}")
    elif largest_px is not None and count > MANY_IMAGES and largest_px > MANY_IMAGES_MAX_PX:
        out.append(f"{count} images on the active chain (more than {MANY_IMAGES}) and one is {largest_px} px "
                   f"on its long edge: past the API's {MANY_IMAGES_MAX_PX} px limit for requests with more than "
                   f"{MANY_IMAGES} images. Fix: {fix}")
    return out
