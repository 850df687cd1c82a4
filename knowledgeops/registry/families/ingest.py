"""Task types that make documents searchable: import, OCR, embedding, indexing.

Entries of the one registry (`knowledgeops.registry.task_types.REGISTRY`); see task_types.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta

from knowledgeops.contracts.document_batch import (
    IMPORT_GROUP,
    SETTLE_BATCH,
    DocumentBatchPayload,
    DocumentBatchResult,
)
from knowledgeops.contracts.document_delete import (
    DELETE_DOCUMENT_CHUNKS,
    DELETE_DOCUMENT_POINTS,
    REMOVE_DOCUMENT,
    STOP_IMPORT,
    DocumentDeletePayload,
    DocumentDeleteResult,
)
from knowledgeops.contracts.document_import import (
    CHUNK_DOCUMENT,
    DISCARD_VERSION,
    EMBED_CHUNKS,
    PARSE_DOCUMENT,
    PUBLISH_VERSION,
    UPSERT_CHUNKS,
    DocumentImportPayload,
    DocumentImportResult,
)
from knowledgeops.contracts.indexing import (
    ADOPT_REBUILT,
    DROP_INDEX,
    LIST_CHANGED_DOCUMENTS,
    LIST_INDEXED_DOCUMENTS,
    PREPARE_REBUILD,
    PREPARE_REINDEX,
    SWITCH_LIVE_INDEX,
    EmbeddingGeneratePayload,
    EmbeddingGenerateResult,
    IndexingUpsertPayload,
    IndexingUpsertResult,
)
from knowledgeops.contracts.ocr import INSPECT_OCR_INPUT, RECOGNIZE_PAGES, OcrPayload, OcrResult
from knowledgeops.registry.spec import (
    ActivityOptions,
    TaskQueue,
    TaskSpec,
    TaskType,
)
from knowledgeops.registry.spec import retry as _retry

LIST_ACTIVITIES: Mapping[str, ActivityOptions] = {
    LIST_INDEXED_DOCUMENTS.name: ActivityOptions(
        start_to_close=timedelta(seconds=30), retry_policy=_retry(5)
    ),
}
INGEST_CLASSES = (
    "activities.indexing:EmbedActivities",
    "activities.indexing:DocumentListActivities",
)

# The embed and upsert steps: DOCUMENT_IMPORT, EMBEDDING_GENERATE and INDEXING_UPSERT run them.
INGEST_ACTIVITIES: Mapping[str, ActivityOptions] = {
    # Batch by batch through the embedding cache; the heartbeat carries the chunk checkpoint.
    EMBED_CHUNKS.name: ActivityOptions(
        start_to_close=timedelta(hours=4),
        heartbeat_timeout=timedelta(seconds=20),
        retry_policy=_retry(8, initial=2.0),
    ),
    # Cached vectors into index points (deterministic ids); the heartbeat carries the checkpoint.
    UPSERT_CHUNKS.name: ActivityOptions(
        start_to_close=timedelta(hours=2),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(8, initial=2.0),
    ),
}

# Parse and chunk: DOCUMENT_IMPORT, and a re-index that splits documents again.
PARSE_ACTIVITIES: Mapping[str, ActivityOptions] = {
    # Parsing runs in a subprocess and heartbeats while it waits for it.
    PARSE_DOCUMENT.name: ActivityOptions(
        start_to_close=timedelta(minutes=30),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(3),
        task_queue=TaskQueue.PARSE,
    ),
    # Splits the parsed text in the parser subprocess (so on the parsers' queue); redone
    # from the stored sections on retry.
    CHUNK_DOCUMENT.name: ActivityOptions(
        start_to_close=timedelta(minutes=30),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(3),
        task_queue=TaskQueue.PARSE,
    ),
}
# Publish or discard a version: DOCUMENT_IMPORT, and a re-index's rebuild of a document.
VERSION_ACTIVITIES: Mapping[str, ActivityOptions] = {
    # Unstage this version's points, delete the other versions'; idempotent.
    PUBLISH_VERSION.name: ActivityOptions(
        start_to_close=timedelta(minutes=10),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(10),
    ),
    DISCARD_VERSION.name: ActivityOptions(
        start_to_close=timedelta(minutes=10),
        heartbeat_timeout=timedelta(seconds=30),
        retry_policy=_retry(10),
    ),
}
# The re-index's own steps: each is one short call (listing, alias switch, a page of chunk
# files); the rebuilds are child tasks.
_SHORT = ActivityOptions(
    start_to_close=timedelta(minutes=10),
    heartbeat_timeout=timedelta(seconds=60),
    retry_policy=_retry(10),
)
REINDEX_ACTIVITIES: Mapping[str, ActivityOptions] = {
    ref.name: _SHORT
    for ref in (
        PREPARE_REINDEX,
        PREPARE_REBUILD,
        LIST_CHANGED_DOCUMENTS,
        SWITCH_LIVE_INDEX,
        ADOPT_REBUILT,
        DROP_INDEX,
    )
}

SPECS: list[TaskSpec] = [
    TaskSpec(
        TaskType.DOCUMENT_IMPORT,
        DocumentImportPayload,
        TaskQueue.INGEST,
        "Parse, chunk, embed and index a stored file so it becomes searchable.",
        execution_timeout=timedelta(hours=12),
        workflow_name="DocumentImport",
        workflow_class="workflows.document_import:DocumentImportWorkflow",
        result_model=DocumentImportResult,
        activities={
            **PARSE_ACTIVITIES,
            **INGEST_ACTIVITIES,
            **VERSION_ACTIVITIES,
        },
        activity_classes=(
            "activities.document_import:ImportActivities",
            "activities.indexing:EmbedActivities",
        ),
        progress_unit="chunks",
        projection="knowledgeops.db.catalogue:DocumentCatalogue",
    ),
    TaskSpec(
        TaskType.DOCUMENT_BATCH_IMPORT,
        DocumentBatchPayload,
        TaskQueue.INGEST,
        "Import many stored files (a folder) as one task: groups of small documents are "
        "parsed, chunked, embedded, indexed and published together, each still a document of "
        "its own; bigger files and scans get their own DOCUMENT_IMPORT as child tasks.",
        execution_timeout=timedelta(hours=48),
        workflow_name="DocumentBatchImport",
        workflow_class="workflows.document_batch:DocumentBatchImportWorkflow",
        result_model=DocumentBatchResult,
        activities={
            # A group of documents end to end (one parser job, a few embedding requests, one
            # index write, one database transaction); the heartbeat carries its stage.
            IMPORT_GROUP.name: ActivityOptions(
                start_to_close=timedelta(hours=1),
                # Beats every second; a dead worker's group is retried elsewhere this soon.
                heartbeat_timeout=timedelta(seconds=15),
                retry_policy=_retry(5, initial=2.0),
            ),
            # A failed or cancelled batch: its documents still importing are settled.
            SETTLE_BATCH.name: ActivityOptions(
                start_to_close=timedelta(minutes=30),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(10),
            ),
        },
        activity_classes=("activities.document_batch:BatchImportActivities",),
        progress_unit="documents",
    ),
    TaskSpec(
        TaskType.DOCUMENT_DELETE,
        DocumentDeletePayload,
        # Where the index is open (the embedded one lives in the ingest worker).
        TaskQueue.INGEST,
        "Remove a document: stop its import, delete its points, chunks, catalogue row and "
        "stored file. Search stops returning it when the delete is asked for.",
        execution_timeout=timedelta(hours=1),
        workflow_name="DocumentDelete",
        workflow_class="workflows.document_delete:DocumentDeleteWorkflow",
        result_model=DocumentDeleteResult,
        activities={
            # Cancels the import and heartbeats while it waits for it to close: an import
            # stops at its next heartbeat (seconds), or its worker is gone and it times out.
            STOP_IMPORT.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(5, initial=5.0),
            ),
            # By filter, in every index collection; idempotent.
            DELETE_DOCUMENT_POINTS.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=60),
                retry_policy=_retry(10),
            ),
            # Unlinks a few files.
            DELETE_DOCUMENT_CHUNKS.name: ActivityOptions(
                start_to_close=timedelta(seconds=30), retry_policy=_retry(10)
            ),
            # The catalogue row and its audit record in one transaction, then the file (after
            # reading the inputs of every queued import: it heartbeats meanwhile).
            REMOVE_DOCUMENT.name: ActivityOptions(
                start_to_close=timedelta(minutes=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(10),
            ),
        },
        activity_classes=("activities.document_delete:DocumentDeleteActivities",),
        progress_unit="steps",
    ),
    TaskSpec(
        TaskType.OCR_PROCESS,
        OcrPayload,
        TaskQueue.INGEST,
        "Recognise the text (Chinese and English) of an image or of a stored PDF's pages, "
        "offline, page by page; the text goes to the OCR store, keyed by file.",
        execution_timeout=timedelta(hours=12),
        workflow_name="OcrProcess",
        workflow_class="workflows.ocr:OcrProcessWorkflow",
        result_model=OcrResult,
        activities={
            # Opens the file in the OCR subprocess to learn its format and page count.
            INSPECT_OCR_INPUT.name: ActivityOptions(
                start_to_close=timedelta(minutes=5),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(3),
            ),
            # Page by page (~1-4 s each here); the heartbeat carries the page checkpoint.
            RECOGNIZE_PAGES.name: ActivityOptions(
                start_to_close=timedelta(hours=10),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=_retry(5, initial=2.0),
            ),
        },
        activity_classes=("activities.ocr:OcrActivities",),
        progress_unit="pages",
    ),
    TaskSpec(
        TaskType.EMBEDDING_GENERATE,
        EmbeddingGeneratePayload,
        TaskQueue.INGEST,
        "Embed a stored document's chunks (a range, or every document's) with a named "
        "model into the embedding cache; what is cached already is not paid again.",
        workflow_name="EmbeddingGenerate",
        workflow_class="workflows.indexing:EmbeddingGenerateWorkflow",
        result_model=EmbeddingGenerateResult,
        # The embed step is DOCUMENT_IMPORT's (same queue, same activity class).
        activities={**INGEST_ACTIVITIES, **LIST_ACTIVITIES},
        activity_classes=INGEST_CLASSES,
        progress_unit="documents",
    ),
    TaskSpec(
        TaskType.INDEXING_UPSERT,
        IndexingUpsertPayload,
        TaskQueue.INGEST,
        "Write stored chunks with their cached vectors into a named collection "
        "(deterministic point ids: idempotent); or re-index: rebuild every document into a "
        "new collection (a new model, a new chunk size) and switch search to it.",
        workflow_name="IndexingUpsert",
        workflow_class="workflows.indexing:IndexingUpsertWorkflow",
        result_model=IndexingUpsertResult,
        activities={
            **INGEST_ACTIVITIES,
            **LIST_ACTIVITIES,
            **PARSE_ACTIVITIES,
            **VERSION_ACTIVITIES,
            **REINDEX_ACTIVITIES,
        },
        activity_classes=(
            *INGEST_CLASSES,
            "activities.document_import:ImportActivities",
            "activities.reindex:ReindexActivities",
        ),
        progress_unit="documents",
    ),
]
