"""The local text toolkit: sentences, terms, cloze blanks and sentence centrality for English
and Chinese text, with no model and no Temporal (the local methods in `knowledgeops/learning/`
are built on it)."""
