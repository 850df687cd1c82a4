"""The local methods of the AI task types: what can honestly be made without a chat model
(extractive summaries, outlines, glossaries, cloze quizzes and cards), built on the text
toolkit of `knowledgeops/text/`. Plain functions and models, no Temporal."""
