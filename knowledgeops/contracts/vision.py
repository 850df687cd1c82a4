"""VISION_ANALYZE's contract: payload, activity request, result, and the stored output.

The image never crosses Temporal: the payload names a stored file (or a document, whose file is
looked up) and a page; the activity reads it from storage, and the analysis is stored with
`OutputStore` under the task id. The result carries the method, the image's size and the tokens.
"""

from __future__ import annotations

from pydantic import BaseModel, Field, model_validator

from knowledgeops.contracts.ai import TokenUsage
from knowledgeops.contracts.base import ActivityRef
from knowledgeops.contracts.document_import import DOCUMENT_ID_PATTERN
from knowledgeops.contracts.ocr import FILE_ID_PATTERN

DEFAULT_INSTRUCTION = "Describe this image and what a learner should take from it."
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,199}$"
LOCAL_METHOD = "local:image-properties"


class VisionAnalyzePayload(BaseModel):
    """A stored image or PDF (`file_id`, or the file of `document_id`), the page to look at
    (a PDF page or TIFF frame, 1-based; other images have only page 1) and the instruction."""

    file_id: str | None = Field(default=None, pattern=FILE_ID_PATTERN)
    document_id: str | None = Field(default=None, pattern=DOCUMENT_ID_PATTERN)
    page: int = Field(default=1, ge=1)
    instruction: str = Field(default=DEFAULT_INSTRUCTION, min_length=1, max_length=4000)

    @model_validator(mode="after")
    def _one_source(self) -> VisionAnalyzePayload:
        if (self.file_id is None) == (self.document_id is None):
            raise ValueError("give exactly one of file_id (a stored file) and document_id")
        return self


class AnalyzeRequest(BaseModel):
    output_id: str = Field(pattern=TASK_ID_PATTERN)
    file_id: str | None
    document_id: str | None
    page: int
    instruction: str


class Colour(BaseModel):
    hex: str
    name: str
    # Share of the image's pixels (0..1) closest to this colour.
    share: float


class ImageProperties(BaseModel):
    format: str
    width: int
    height: int
    mode: str
    bytes: int
    # Pages (PDF) or frames (TIFF) the file has; 1 for other images.
    pages: int
    dominant_colours: list[Colour]


class Analysis(BaseModel):
    """What the vision model answers (strict structured output: every field required)."""

    description: str = Field(description="what the image shows, in a few sentences")
    objects: list[str] = Field(description="the objects, people or places visible")
    figures: list[str] = Field(
        description="each chart, diagram, table or formula, with what it shows"
    )
    text_seen: str = Field(description="the text readable in the image, in reading order")
    answer: str = Field(description="the answer to the instruction")


class VisionOutput(BaseModel):
    """What `GET /v1/tasks/{task_id}/output` serves for this type."""

    file_id: str
    page: int
    instruction: str
    method: str
    image: ImageProperties
    description: str
    objects: list[str]
    figures: list[str]
    text_seen: str
    # None without a vision model: the local method describes, it does not answer.
    answer: str | None
    # Text OCR_PROCESS stored for this page, when it has run (given to the model too).
    ocr_text: str | None
    usage: TokenUsage


class VisionResult(BaseModel):
    file_id: str
    page: int
    method: str
    format: str
    width: int
    height: int
    ocr_text_used: bool
    usage: TokenUsage
    output_id: str
    output_url: str


ANALYZE_IMAGE: ActivityRef[AnalyzeRequest, VisionResult] = ActivityRef(
    "analyze_image", AnalyzeRequest, VisionResult
)
