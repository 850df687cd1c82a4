"""`knowledgeops run TYPE | status | cancel | message | schedules`: tasks of any type and the
maintenance schedules, through the task service."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from knowledgeops.registry.task_types import REGISTRY, TaskType, spec_for
from starter.cli.common import (
    FOLLOW_CODE,
    actor,
    add_command,
    epilog_section,
    exit_codes,
    follow_and_report,
    print_status,
)

if TYPE_CHECKING:
    from starter.services.document_models import ImportRef
    from starter.services.tasks import TaskQueueService


def add_parser(sub: Any) -> None:
    # A spec's summary is `TYPE: what it does`; the row's key names the type already.
    types = epilog_section(
        "task types (TYPE)",
        [(t.value, spec.summary.partition(": ")[2]) for t, spec in REGISTRY.items()],
        width=max(len(t.value) for t in REGISTRY),
    )
    invalid = (1, "an invalid --payload (not JSON, or not what TYPE takes)")
    r = add_command(
        sub,
        "run",
        "start a task of any type",
        epilog=f"{types}\n\n{exit_codes(invalid, FOLLOW_CODE)}",
    )
    r.add_argument(
        "task_type",
        choices=[t.value for t in REGISTRY],
        metavar="TYPE",
        help="the task type, one of those listed below",
    )
    r.add_argument(
        "--payload",
        default="{}",
        metavar="JSON",
        help="the task's input: JSON, or @FILE to read it from FILE (default: {})",
    )
    r.add_argument(
        "--idempotency-key",
        metavar="KEY",
        help="starting again with the same KEY returns the task it started (default: none)",
    )
    r.add_argument("--follow", action="store_true", help="show progress until it finishes")
    r.add_argument(
        "--json",
        action="store_true",
        help="print JSON: the task started (with --follow: its final status)",
    )

    s = add_command(
        sub, "status", "status and progress of a task", epilog=exit_codes((1, "no such task"))
    )
    s.add_argument("task_id", help="the task's id (printed when it was started)")
    s.add_argument("--json", action="store_true", help="print the status as JSON")

    c = add_command(
        sub,
        "cancel",
        "cancel a task (an import's partial index entries go)",
        epilog=exit_codes((1, "no such task, or it has finished")),
    )
    c.add_argument("task_id", help="the task's id")
    c.add_argument("--reason", default="", help="recorded in the audit log (default: none)")

    m = add_command(
        sub,
        "message",
        "send a follow-up message to an agent task, print the reply",
        epilog=exit_codes((1, "no such task, not an AGENT_TASK, or it has finished")),
    )
    m.add_argument("task_id", help="the AGENT_TASK's id")
    m.add_argument("text", help="the message")
    m.add_argument("--json", action="store_true", help="print the whole answer as JSON")


def add_schedules(sub: Any) -> None:
    sc = add_command(sub, "schedules", "the maintenance schedules (backup, cleanup, report)")
    scsub = sc.add_subparsers(dest="action", required=True, metavar="ACTION", help="one of:")
    scl = add_command(scsub, "list", "each schedule: cron, paused, next and recent runs")
    scl.add_argument("--json", action="store_true", help="print the schedules as JSON")
    scheduled = ", ".join(t.value for t, spec in REGISTRY.items() if spec.schedule)
    for action, text in (
        ("pause", "stop starting runs until unpaused"),
        ("unpause", "start runs again"),
        ("trigger", "start a run now"),
    ):
        a = add_command(scsub, action, text, epilog=exit_codes((1, "no such schedule")))
        a.add_argument("task_type", metavar="TYPE", help=f"the scheduled type: {scheduled}")
        a.add_argument("--reason", default="", help="recorded in the audit log (default: none)")


async def command(service: TaskQueueService, args: argparse.Namespace) -> int:
    if args.command == "run":
        return await _run_task(service, args)
    if args.command == "schedules":
        return await _schedules(service, args)
    if args.command == "status":
        st = await service.get_status(args.task_id)
        if args.json:
            print(st.model_dump_json(indent=2))
        else:
            print_status(st)
        return 0
    if args.command == "cancel":
        await service.cancel(args.task_id, reason=args.reason, actor=actor())
        print(f"cancel requested for {args.task_id}")
        return 0
    if args.command == "message":
        return await _message(service, args.task_id, args.text, args.json)
    raise AssertionError(args.command)


async def _message(service: TaskQueueService, task_id: str, text: str, as_json: bool) -> int:
    """`knowledgeops message TASK TEXT`: the reply (or, with --json, the whole answer)."""
    # Imported here: only this command needs the agent's transcript and the store.
    from knowledgeops.files.data_files import open_storage
    from starter.services.agent import send_message

    answer = await send_message(service, open_storage(service.settings)[0], task_id, text)
    if as_json:
        print(answer.model_dump_json(indent=2))
    elif answer.reply is not None:
        print(answer.reply)
    else:
        print(f"reply {answer.reply_id} is in the transcript: GET /v1/tasks/{task_id}/output")
    return 0


async def _run_task(service: TaskQueueService, args: argparse.Namespace) -> int:
    text = args.payload
    if text.startswith("@"):
        text = await asyncio.to_thread(Path(text[1:]).read_text)
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"--payload is not valid JSON: {e}") from None
    if args.task_type == TaskType.DOCUMENT_IMPORT.value:
        ref: Any = await _import_by_payload(service, payload, args.idempotency_key)
    else:
        ref = await service.enqueue(
            args.task_type, payload, idempotency_key=args.idempotency_key, requested_by=actor()
        )
    if not args.follow:
        print(ref.model_dump_json(indent=2) if args.json else ref.task_id)
        return 0
    return await follow_and_report(service, [(args.task_type, ref.task_id)], quiet=args.json)


async def _schedules(service: TaskQueueService, args: argparse.Namespace) -> int:
    from knowledgeops.runtime import schedules

    client, settings = service.client, service.settings
    if args.action == "list":
        found = await schedules.list_schedules(client, settings)
        if args.json:
            print(json.dumps([s.model_dump() for s in found], indent=2))
            return 0
        for s in found:
            state = "paused" if s.paused else "active"
            print(f"{s.schedule_id}  {s.task_type:<16} {' '.join(s.cron):<14} {state}")
            print(f"    next: {', '.join(s.next_runs) or '-'}")
        if not found:
            print("no schedules (they are created when a worker starts)")
        return 0
    action = {"pause": schedules.pause, "unpause": schedules.unpause}.get(args.action)
    sid = schedules.schedule_id(settings, spec_for(args.task_type.upper()).task_type)
    try:
        if action is not None:
            await action(client, settings, args.task_type, args.reason or f"{args.action} by CLI")
        else:
            await schedules.trigger(client, settings, args.task_type)
    except Exception as e:
        await service.audit(
            actor(), f"schedule_{args.action}", [sid], args.reason, "refused", {"error": str(e)}
        )
        raise
    await service.audit(actor(), f"schedule_{args.action}", [sid], args.reason, "done")
    print(f"{args.action}: {args.task_type}")
    return 0


async def _import_by_payload(service: TaskQueueService, raw: Any, key: str | None) -> ImportRef:
    """A DOCUMENT_IMPORT goes through the document path (its one task id, admission), as
    `POST /v1/tasks` does: two imports of one document must never race."""
    from pydantic import ValidationError

    from knowledgeops.contracts.document_import import DocumentImportPayload
    from knowledgeops.errors import validation_text
    from starter.services.documents import DocumentService

    try:
        payload = DocumentImportPayload.model_validate(raw)
    except ValidationError as e:
        problems = validation_text(e.errors())
        raise ValueError(f"Invalid DOCUMENT_IMPORT payload: {problems}") from None
    assert service.db is not None  # task_service opens it
    documents = DocumentService(service, service.db, service.settings)
    await documents.admit_stored(payload.file_id)
    return await documents.import_stored(
        payload.file_id,
        filename=payload.filename,
        document_id=payload.document_id,
        metadata=payload.metadata,
        idempotency_key=key,
        requested_by=actor(),
        chunking=payload.chunking,
        embed_batch_size=payload.embed_batch_size,
    )
