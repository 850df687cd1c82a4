"""The `knowledgeops` command: `main` builds the parser and dispatches; one module per command
family (documents, upload, maintenance, index, ocr, storage, cards), `common` and `progress`
for what they share."""
