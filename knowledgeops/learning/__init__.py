"""Learning artifacts, review cards and AI analysis, the domain of GENERATE_ARTIFACT,
GENERATE_REVIEW_CARD and AI_ANALYSIS: what a chat model is asked and how its answers are merged
(`*_model`), what can honestly be made without one (`*_local`: extractive summaries, outlines,
glossaries, cloze quizzes and cards, key terms and readability, built on the text toolkit of
`knowledgeops/text/`), and the Markdown / Mermaid rendering (`*_render`). Plain functions and
models, no Temporal."""
