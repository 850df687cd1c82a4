"""Learning artifacts and review cards, the domain of GENERATE_ARTIFACT and REVIEW_CARDS: what a
chat model is asked and how its answers are merged (`*_model`), what can honestly be made
without one (`*_local`: extractive summaries, outlines, glossaries, cloze quizzes and cards,
built on the text toolkit of `knowledgeops/text/`), and the Markdown / Mermaid rendering.
Plain functions and models, no Temporal."""
