"""The image work of VISION_ANALYZE: reading a stored image or rendering a PDF page, what a
vision model is sent (a bounded re-encoding when the stored file is unfit), the image's
properties and dominant colours, and the two methods: the prompt and structured answer of a
vision model (`model`), and the honest description made without one (`local`).
Plain functions and models, no Temporal."""
