"""Access to the public API (issue 11, "Access"), over real HTTP with the real worker and
Temporal: tokens, only this system's tasks, browser safety, scoped search and listings, the
per-document import through POST /v1/tasks, the audit actor."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError
from temporalio.client import WorkflowHandle
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from knowledgeops.config.settings import Settings
from knowledgeops.db.audit import AuditRow
from knowledgeops.db.catalogue import DocumentCatalogue
from knowledgeops.db.database import Database
from knowledgeops.files import file_store
from knowledgeops.registry.task_types import TASK_TYPE_SEARCH_ATTRIBUTE
from knowledgeops.runtime.temporal import connect
from starter.processes import serve_api_only
from tests.helpers.documents import numbered_paragraphs, upload
from tests.helpers.environment import API_TOKEN, EXAMPLES, running_api
from tests.helpers.http import app_routes
from tests.helpers.problems import code, problem

ALICE_TOKEN = "alice-token-0123456789"
BOB_TOKEN = "bob-token-0123456789ab"
OWNERS = f"{API_TOKEN}:tester,{ALICE_TOKEN}:alice-app:alice,{BOB_TOKEN}:bob-app:bob"


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def test_public_routes_need_an_api_token(settings: Settings) -> None:
    async with running_api(settings, workers=False) as api:
        no_token = {"Authorization": ""}
        every = app_routes(api.settings)
        routes = [r for r in every if not r[1].startswith("/v1/admin")]
        assert len(routes) > 15 and ("GET", "/metrics") in routes
        # The admin API: no token is unauthenticated, a public API token is not an admin's.
        for method, path in [r for r in every if r[1].startswith("/v1/admin")]:
            r = await api.http.request(method, path, headers=no_token, json={})
            assert r.status_code == 401, (method, path, r.text)
            r = await api.http.request(method, path, headers=bearer(API_TOKEN), json={})
            assert r.status_code == 403, (method, path, r.text)
        for method, path in routes:
            r = await api.http.request(method, path, headers=no_token, json={})
            assert r.status_code == 401, (method, path, r.text)
            assert code(r) == "unauthenticated" and r.headers["www-authenticate"] == "Bearer"
            r = await api.http.request(method, path, headers=bearer("not-a-token"), json={})
            assert r.status_code == 403 and code(r) == "forbidden", (method, path, r.text)
        # Health and the API's own documentation stay open.
        assert (await api.http.get("/healthz", headers=no_token)).status_code == 200
        assert (await api.http.get("/docs", headers=no_token)).status_code == 200
        assert (await api.http.get("/v1/documents")).status_code == 200  # the default token

    # No API_TOKENS: open on loopback, as `dev` runs with no setup.
    async with running_api(settings, workers=False, api_tokens="") as api:
        assert (await api.http.get("/v1/documents")).status_code == 200
    # ...and refused on any other address: nothing is served.
    exposed = settings.model_copy(update={"api_host": "0.0.0.0", "api_tokens": ""})
    with pytest.raises(RuntimeError, match="API_TOKENS"):
        await serve_api_only(exposed, asyncio.Event())


async def _history_has_cancel_request(handle: WorkflowHandle[Any, Any]) -> bool:
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_cancel_requested_event_attributes"):
            return True
    return False


async def test_only_this_systems_tasks_are_reachable(settings: Settings) -> None:
    client = await connect(settings)
    tag = uuid.uuid4().hex[:8]
    # A workflow of someone else in the namespace under our prefix (no TaskType attribute)...
    foreign = await client.start_workflow(
        "SomeoneElsesWorkflow", id=settings.task_id(f"foreign-{tag}"), task_queue=f"other-{tag}"
    )
    # ...and one that carries the attribute but not this deployment's prefix.
    unprefixed = await client.start_workflow(
        "DocumentImport",
        id=f"elsewhere-{tag}",
        task_queue=f"other-{tag}",
        search_attributes=TypedSearchAttributes(
            [SearchAttributePair(TASK_TYPE_SEARCH_ATTRIBUTE, "DOCUMENT_IMPORT")]
        ),
    )
    try:
        async with running_api(settings, workers=False) as api:
            for handle in (foreign, unprefixed):
                task = handle.id
                for method, path, headers in [
                    ("GET", f"/v1/tasks/{task}", None),
                    ("POST", f"/v1/tasks/{task}/cancel", None),
                    ("GET", f"/v1/tasks/{task}/events", None),
                    ("GET", f"/v1/admin/tasks/{task}", api.admin),
                    ("POST", f"/v1/admin/tasks/{task}/cancel", api.admin),
                    ("POST", f"/v1/admin/tasks/{task}/retry", api.admin),
                ]:
                    r = await api.http.request(method, path, json={"reason": "x"}, headers=headers)
                    assert r.status_code == 404 and code(r) == "not_found", (path, r.text)
                assert not await _history_has_cancel_request(handle)
            # This system's own tasks still answer.
            r = await api.http.post("/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"))
            assert (await api.http.get(r.json()["status_url"])).json()["status"] == "pending"
    finally:
        for handle in (foreign, unprefixed):
            await handle.terminate("test over")


async def test_browser_cannot_rebind_or_change_state_cross_site(settings: Settings) -> None:
    async with running_api(settings, workers=False, api_tokens="") as api:
        http, port = api.http, api.settings.api_port
        # DNS rebinding: the page's own host name reaches 127.0.0.1; refused on every route.
        for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1.evil.example:{port}"):
            r = await http.get("/v1/documents", headers={"Host": host})
            assert r.status_code == 400 and code(r) == "host_not_allowed", r.text
        assert (await http.get("/v1/documents", headers={"Host": f"localhost:{port}"})).is_success

        # A plain form post (what any page can send cross-site without a preflight).
        r = await http.post("/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"))
        assert r.status_code == 403 and code(r) == "csrf_header_required", r.text
        assert not list(settings.files_dir.glob("*")), "nothing stored"
        r = await http.post(
            "/v1/tasks/x/cancel", content=b"{}", headers={"Content-Type": "text/plain"}
        )
        assert r.status_code == 403 and code(r) == "csrf_header_required"

        # What a browser only sends after a preflight (never granted here) is accepted.
        xrw = {"X-Requested-With": "XMLHttpRequest"}
        r = await http.post(
            "/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt"), headers=xrw
        )
        assert r.status_code == 202, r.text
        task = r.json()["task_id"]
        r = await http.post("/v1/tasks", json={"type": "NOPE", "payload": {}})
        assert r.status_code == 400 and code(r) == "unknown_task_type"  # JSON passes the guard

        # Cross-site, even with an accepted shape: refused by Sec-Fetch-Site or Origin.
        for headers in (
            {"Sec-Fetch-Site": "cross-site"},
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
        ):
            r = await http.post(f"/v1/tasks/{task}/cancel", json={}, headers=headers)
            assert r.status_code == 403 and code(r) == "cross_site", (headers, r.text)
            r = await http.delete("/v1/documents/x", headers={**headers, **xrw})
            assert r.status_code == 403 and code(r) == "cross_site"
        assert (await http.get(f"/v1/tasks/{task}")).json()["status"] == "pending"
        # Reads from another origin are answered, but without CORS a page cannot read them.
        r = await http.get("/v1/documents", headers={"Origin": "https://evil.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers
        # The same page's own origin may change state.
        r = await http.post(
            f"/v1/tasks/{task}/cancel", json={}, headers={"Origin": f"http://localhost:{port}"}
        )
        assert r.status_code == 202, r.text


async def test_scoped_search_listing_and_owner_bound_tokens(
    settings: Settings, tmp_path: Path
) -> None:
    notes = tmp_path / "river-notes.txt"
    notes.write_text(numbered_paragraphs(8))
    async with running_api(settings, api_tokens=OWNERS) as api:
        http = api.http
        imports = {
            "river": (notes, {"owner": "alice", "tags": "notes,river"}),
            "spaced": (EXAMPLES / "spaced-repetition.txt", {"owner": "alice", "tags": "notes"}),
            "plants": (EXAMPLES / "photosynthesis.html", {"owner": "bob", "tags": "notes"}),
        }
        docs: dict[str, dict[str, Any]] = {}
        for name, (path, form) in imports.items():
            r = await http.post("/v1/documents", **upload(path, **form))
            assert r.status_code == 202, r.text
            docs[name] = r.json()
        for d in docs.values():
            assert (await api.wait_task(d["task_id"]))["status"] == "completed"
        ids = {name: d["document_id"] for name, d in docs.items()}
        alice = {ids["river"], ids["spaced"]}

        async def found(params: dict[str, Any], token: str = API_TOKEN) -> list[str]:
            r = await http.get("/v1/search", params=params, headers=bearer(token))
            assert r.status_code == 200, r.text
            return [h["document_id"] for h in r.json()]

        q = "What does RuBisCO fix?"
        assert (await found({"q": q, "k": 1}))[0] == ids["plants"]  # bob's is the nearest
        # Filtered inside the vector query: still k hits, all of the selected documents.
        scoped = await found({"q": q, "k": 6, "owner": "alice"})
        assert len(scoped) == 6 and set(scoped) <= alice, scoped
        assert set(await found({"q": q, "k": 4, "tags": ["notes", "river"]})) == {ids["river"]}
        two = await found({"q": q, "k": 20, "document_id": [ids["spaced"], ids["plants"]]})
        assert set(two) == {ids["spaced"], ids["plants"]}
        assert await found({"q": q, "owner": "alice", "document_id": [ids["plants"]]}) == []

        async def listed(params: dict[str, Any], token: str = API_TOKEN) -> set[str]:
            r = await http.get("/v1/documents", params=params, headers=bearer(token))
            assert r.status_code == 200, r.text
            assert r.json()["total"] == len(r.json()["items"])
            return {d["document_id"] for d in r.json()["items"]}

        assert await listed({"owner": "alice"}) == alice
        assert await listed({"tags": ["notes", "river"]}) == {ids["river"]}
        assert await listed({"tags": "notes"}) == set(ids.values())
        assert await listed({"document_id": [ids["river"], ids["plants"]]}) == {
            ids["river"],
            ids["plants"],
        }

        # A token bound to alice: only alice's documents and tasks, whatever is asked.
        a = bearer(ALICE_TOKEN)
        assert await listed({}, ALICE_TOKEN) == alice
        assert await listed({"owner": "bob"}, ALICE_TOKEN) == set()
        hits = await found({"q": q, "k": 6}, ALICE_TOKEN)
        assert len(hits) == 6 and set(hits) <= alice
        assert await found({"q": q, "document_id": [ids["plants"]]}, ALICE_TOKEN) == []
        plants, plants_task = ids["plants"], docs["plants"]["task_id"]
        for method, path in [
            ("GET", f"/v1/documents/{plants}"),
            ("DELETE", f"/v1/documents/{plants}"),
            ("GET", f"/v1/tasks/{plants_task}"),
            ("POST", f"/v1/tasks/{plants_task}/cancel"),
            ("GET", f"/v1/tasks/{plants_task}/events"),
            ("GET", f"/v1/events?task_id={plants_task}"),
        ]:
            r = await http.request(method, path, headers=a, json={})
            assert r.status_code == 404 and code(r) == "not_found", (method, path, r.text)
        assert (await http.get(f"/v1/documents/{plants}")).status_code == 200  # still there
        assert (await http.get(f"/v1/documents/{ids['spaced']}", headers=a)).status_code == 200
        river_task = docs["river"]["task_id"]
        assert (await http.get(f"/v1/tasks/{river_task}", headers=a)).status_code == 200
        events = await http.get("/v1/events", params={"task_id": river_task}, headers=a)
        assert events.status_code == 200 and events.json()["events"]
        for path in ("/v1/events", "/v1/reports"):  # spans every owner
            assert (await http.get(path, headers=a)).status_code == 403
        r = await http.post("/v1/tasks", json={"type": "BACKUP_EXECUTE", "payload": {}}, headers=a)
        assert r.status_code == 403
        # The AI types read the documents a payload names: only its owner's.
        for payload in ({"document_id": plants}, {"document_id": "no-such-doc"}):
            body = {"type": "GENERATE_ARTIFACT", "payload": {**payload, "kind": "outline"}}
            r = await http.post("/v1/tasks", json=body, headers=a)
            assert r.status_code == 404 and code(r) == "not_found", r.text
        agent = {"instruction": "list them", "document_ids": [ids["spaced"], plants]}
        r = await http.post("/v1/tasks", json={"type": "AGENT_TASK", "payload": agent}, headers=a)
        assert r.status_code == 404, r.text
        mine = {"document_id": ids["spaced"], "kind": "outline", "method": "local"}
        r = await http.post(
            "/v1/tasks", json={"type": "GENERATE_ARTIFACT", "payload": mine}, headers=a
        )
        assert r.status_code == 202, r.text

        # Its imports are its owner's; importing for someone else is refused.
        water = EXAMPLES / "water-cycle.pdf"
        r = await http.post("/v1/documents", **upload(water, owner="bob"), headers=a)
        assert r.status_code == 403, r.text
        r = await http.post("/v1/documents", **upload(water), headers=a)
        assert r.status_code == 202, r.text
        mine = r.json()
        assert (await api.wait_task(mine["task_id"]))["status"] == "completed"
        detail = (await http.get(f"/v1/documents/{mine['document_id']}", headers=a)).json()
        assert detail["owner"] == "alice"
        # The same bytes imported by bob are bob's own document, not alice's re-listed.
        r = await http.post("/v1/documents", **upload(water), headers=bearer(BOB_TOKEN))
        assert r.json()["document_id"] != mine["document_id"]
        assert (await api.wait_task(r.json()["task_id"]))["status"] == "completed"
        assert (await http.get(f"/v1/documents/{mine['document_id']}", headers=a)).is_success
        # Naming a document id of another owner's document is refused.
        stored = sorted(settings.files_dir.iterdir())
        fresh = tmp_path / "owls.txt"
        fresh.write_text("Owls hunt at night and swallow their prey whole.\n")
        r = await http.post("/v1/documents", **upload(fresh, document_id=plants), headers=a)
        assert r.status_code == 409 and code(r) == "document_id_taken"
        assert sorted(settings.files_dir.iterdir()) == stored, "nothing stored"
        r = await http.delete(f"/v1/documents/{mine['document_id']}", headers=a)
        assert r.status_code == 202, r.text


async def test_document_import_through_tasks_takes_the_document_path(
    settings: Settings,
) -> None:
    async with running_api(settings, workers=False) as api:
        file_id = file_store.store_path(
            settings.files_dir, EXAMPLES / "spaced-repetition.txt", settings.max_file_bytes
        )
        body = {
            "type": "DOCUMENT_IMPORT",
            "payload": {"file_id": file_id, "document_id": "race-doc", "filename": "s.txt"},
        }
        first, second = await asyncio.gather(
            api.http.post("/v1/tasks", json=body), api.http.post("/v1/tasks", json=body)
        )
        assert first.status_code == second.status_code == 202, first.text
        # One task per document: the second submission joins the first instead of racing it.
        expected = settings.task_id("import-race-doc")
        assert first.json()["task_id"] == second.json()["task_id"] == expected
        again = await api.http.post(
            "/v1/documents", **upload(EXAMPLES / "spaced-repetition.txt", document_id="race-doc")
        )
        assert again.json()["task_id"] == expected
        # The payload is still validated as a DOCUMENT_IMPORT payload.
        bad = {"type": "DOCUMENT_IMPORT", "payload": {"file_id": "../etc", "document_id": "x"}}
        r = await api.http.post("/v1/tasks", json=bad)
        assert r.status_code == 422 and code(r) == "invalid_payload"


async def test_audit_actor_is_the_authenticated_caller(settings: Settings) -> None:
    async with running_api(settings, api_tokens=OWNERS) as api:
        uploaded = []
        for name in ("spaced-repetition.txt", "temporal-retries.md"):
            r = await api.http.post("/v1/documents", **upload(EXAMPLES / name, owner="alice"))
            uploaded.append(r.json())
        for d in uploaded:
            assert (await api.wait_task(d["task_id"]))["status"] == "completed"
        victim = uploaded[0]["document_id"]
        r = await api.http.delete(
            f"/v1/documents/{victim}",
            params={"reason": "user asked", "actor": "x" * 300},
            headers=bearer(ALICE_TOKEN),
        )
        assert r.status_code == 202, r.text
        assert (await api.wait_task(r.json()["task_id"]))["status"] == "completed"
        audit = await api.http.get(
            "/v1/admin/audit", params={"action": "document_delete"}, headers=api.admin
        )
        records = audit.json()  # newest first: the task's record, then the request's
        assert [(r["actor"], r["outcome"]) for r in records] == [
            ("alice-app", "deleted"),
            ("alice-app", "requested"),
        ]
        assert all(r["details"]["document_id"] == victim for r in records)
    # The catalogue delete and its audit record are one transaction: a record that cannot
    # be written leaves the document listed.
    db = await Database.open(api.settings)
    try:
        catalogue = DocumentCatalogue(db)
        kept = uploaded[1]["document_id"]
        unwritable = AuditRow(action="document_delete", task_ids=[], outcome="deleted")
        with pytest.raises(IntegrityError):
            await catalogue.delete_audited(kept, unwritable)
        assert await catalogue.get(kept) is not None
    finally:
        await db.close()


async def test_a_deleted_documents_id_stays_with_its_owner(settings: Settings) -> None:
    """Its task history is the document's: another owner may not take the id over and read it."""
    tokens = f"{API_TOKEN}:tester,token-of-bob-0123456789:bob:bob,token-of-eve-0123456789:eve:eve"
    async with running_api(settings, api_tokens=tokens) as api:
        bob = {"Authorization": "Bearer token-of-bob-0123456789"}
        eve = {"Authorization": "Bearer token-of-eve-0123456789"}
        note = EXAMPLES / "spaced-repetition.txt"
        form = {"document_id": "q3-plan"}
        files = {"file": (note.name, note.read_bytes())}
        r = await api.http.post("/v1/documents", files=files, data=form, headers=bob)
        assert r.status_code == 202, r.text
        assert (await api.wait_task(r.json()["task_id"]))["status"] == "completed"
        r = await api.http.delete("/v1/documents/q3-plan", headers=bob)
        assert r.status_code == 202, r.text
        assert (await api.wait_task(r.json()["task_id"]))["status"] == "completed"
        assert (await api.http.delete("/v1/documents/q3-plan", headers=bob)).status_code == 404
        taken = await api.http.post("/v1/documents", files=files, data=form, headers=eve)
        problem(taken, 409, "document_id_taken")
        again = await api.http.post("/v1/documents", files=files, data=form, headers=bob)
        assert again.status_code == 202, again.text
