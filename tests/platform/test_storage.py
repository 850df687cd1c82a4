"""The object-storage contract, run on both backends: a local folder, and S3 against a real
S3-protocol server (`rclone serve s3` on loopback). Also: key checks, `open_store`'s URL forms,
and the start-up check's messages for a misconfigured S3 store."""

from __future__ import annotations

import asyncio
import hashlib
import os
import pickle
import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from knowledgeops.storage.local import LocalStore
from knowledgeops.storage.opening import open_store
from knowledgeops.storage.s3 import S3Store
from knowledgeops.storage.store import (
    StorageConfigError,
    Store,
    StoredObjectMissing,
    check_key,
)
from tests.helpers.s3_server import S3Server, free_port, rclone_s3

BAD_KEYS = ["../x", "/abs", "a//b", "a/./b", "", "a/../b", "a/", "a\\b", "a\x00b", "a/.tmp"]
BIG = 12 * 1024 * 1024 + 123  # over obstore's 5 MiB part size: a multipart upload


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with rclone_s3(tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return LocalStore(tmp_path / "store")
    server: S3Server = request.getfixturevalue("s3_server")
    # One server per module, a prefix of its own per test: tests cannot see each other.
    return open_store(f"{server.url}/{uuid.uuid4().hex[:12]}", tmp_path, server.env())


async def test_put_get_round_trip(store: Store) -> None:
    every_byte = bytes(range(256)) * 4
    await store.put("files/ab/abcd", b"hello")
    await store.put("chunks/doc~v1.jsonl", every_byte)
    await store.put("empty/object", b"")
    assert await store.get("files/ab/abcd") == b"hello"
    assert await store.get("chunks/doc~v1.jsonl") == every_byte
    assert await store.get("empty/object") == b""
    await store.put("files/ab/abcd", b"hello")  # the same bytes again: content-addressed keys
    assert await store.get("files/ab/abcd") == b"hello"


async def test_large_file_round_trip(store: Store, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    data = os.urandom(BIG)
    source.write_bytes(data)
    await store.put_file("files/big", source)
    assert await store.size("files/big") == BIG

    target = tmp_path / "down" / "big.copy"
    await store.get_file("files/big", target)
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert os.listdir(target.parent) == ["big.copy"], "the temp file was not renamed away"
    assert await store.get("files/big") == data


async def test_put_file_of_missing_local_file(store: Store, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as caught:
        await store.put_file("files/x", tmp_path / "not-there")
    assert not isinstance(caught.value, StoredObjectMissing), "the local file is missing"
    assert "not-there" in str(caught.value)
    assert not await store.exists("files/x")


async def test_overwrite_replaces_whole(store: Store) -> None:
    await store.put("doc/x", b"a long first version " * 100)
    await store.put("doc/x", b"short")
    assert await store.get("doc/x") == b"short", "no tail of the longer old version may remain"
    assert await store.size("doc/x") == 5


async def test_missing_object(store: Store, tmp_path: Path) -> None:
    with pytest.raises(StoredObjectMissing) as caught:
        await store.get("files/nope")
    assert isinstance(caught.value, FileNotFoundError)
    assert "files/nope" in str(caught.value)
    copy = pickle.loads(pickle.dumps(caught.value))
    assert copy.key == "files/nope" and str(copy) == str(caught.value)

    assert await store.exists("files/nope") is False
    assert await store.size("files/nope") is None

    target_dir = tmp_path / "downloads"
    target_dir.mkdir()
    with pytest.raises(StoredObjectMissing):
        await store.get_file("files/nope", target_dir / "nope")
    assert list(target_dir.iterdir()) == [], "a failed download must leave no (partial) file"


async def test_exists_and_size(store: Store) -> None:
    await store.put("a/b/c", b"12345")
    assert await store.exists("a/b/c")
    assert await store.size("a/b/c") == 5
    # A folder-like prefix of a key is not an object.
    assert not await store.exists("a/b")
    assert await store.size("a") is None


async def test_list_under_prefix(store: Store) -> None:
    before = datetime.now(UTC) - timedelta(minutes=5)
    contents = {
        "files/a/1": b"1",
        "files/a/2": b"22",
        "files/b/3": b"333",
        "filesX/4": b"4444",  # shares the first letters, not the folder
        "other/5": b"55555",
    }
    for key, data in contents.items():
        await store.put(key, data)

    listed = await store.list("files/")
    assert [(o.key, o.size) for o in listed] == [
        ("files/a/1", 1),
        ("files/a/2", 2),
        ("files/b/3", 3),
    ]
    assert await store.list("files") == listed, "with or without the trailing '/'"
    assert [o.key for o in await store.list("files/a")] == ["files/a/1", "files/a/2"]
    assert [o.key for o in await store.list("")] == sorted(contents)
    assert await store.list("nothing/") == []
    for o in listed:
        assert o.modified.tzinfo is not None and o.modified.utcoffset() == timedelta(0)
        assert before < o.modified < datetime.now(UTC) + timedelta(minutes=5)


async def test_delete_is_idempotent(store: Store) -> None:
    await store.put("d/x", b"x")
    await store.delete("d/x")
    assert not await store.exists("d/x")
    await store.delete("d/x")
    await store.delete("never/written")
    assert await store.list("d") == []


async def test_delete_prefix(store: Store) -> None:
    for key in ["gone/1", "gone/sub/2", "gone/sub/3", "kept/1", "goneX/1"]:
        await store.put(key, b"x")
    assert await store.delete_prefix("gone/") == 3
    assert [o.key for o in await store.list("")] == ["goneX/1", "kept/1"]
    assert await store.delete_prefix("gone") == 0
    with pytest.raises(ValueError, match="non-empty prefix"):
        await store.delete_prefix("")


async def test_check_passes_and_leaves_nothing(store: Store) -> None:
    await store.check()
    await store.check()
    assert await store.list("") == []


@pytest.mark.parametrize("key", BAD_KEYS)
async def test_bad_keys_rejected(store: Store, key: str, tmp_path: Path) -> None:
    some_file = tmp_path / "f"
    some_file.write_bytes(b"x")
    calls = [
        store.put(key, b"x"),
        store.put_file(key, some_file),
        store.get(key),
        store.get_file(key, tmp_path / "out"),
        store.exists(key),
        store.size(key),
        store.delete(key),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="invalid storage key"):
            await call
    if key not in ("", "a/"):  # "" lists everything; "a/" is the folder "a"
        with pytest.raises(ValueError, match="invalid storage prefix"):
            await store.list(key)
        with pytest.raises(ValueError, match="invalid storage prefix"):
            await store.delete_prefix(key)
    assert not (tmp_path / "out").exists()


def test_check_key_accepts_ordinary_keys() -> None:
    for key in ["files/ab/abcdef.pdf", "chunks/doc~v1.jsonl", "x", "a-b_c/d e/ü.txt"]:
        assert check_key(key) == key
    with pytest.raises(ValueError, match="1024 bytes"):
        check_key("k" * 1025)


async def test_concurrent_writes_stay_whole(store: Store) -> None:
    distinct = {f"many/{i:02d}": bytes([i]) * (50_000 + i) for i in range(20)}
    shared = [bytes([100 + i]) * (200_000 + i * 1000) for i in range(10)]
    await asyncio.gather(
        *(store.put(key, data) for key, data in distinct.items()),
        *(store.put("shared/one", data) for data in shared),
    )
    for key, data in distinct.items():
        assert await store.get(key) == data, f"{key} is not what was written to it"
    final = await store.get("shared/one")
    assert final in shared, "the shared key must hold exactly one write, not a mix"


def test_open_store_forms(tmp_path: Path) -> None:
    default = open_store("", tmp_path / "data")
    assert isinstance(default, LocalStore) and default.root == tmp_path / "data"

    folder = tmp_path / "elsewhere"
    chosen = open_store(f"file://{folder}", tmp_path / "data")
    assert isinstance(chosen, LocalStore) and chosen.root == folder

    secret = "s3cr3t-" + secrets.token_hex(8)
    env = {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_ACCESS_KEY_ID": "someone",
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    s3 = open_store("s3://my-bucket/some/prefix", tmp_path, env)
    assert isinstance(s3, S3Store)
    assert (s3.bucket, s3.prefix, s3.region) == ("my-bucket", "some/prefix", "us-east-1")
    assert s3.describe() == "s3://my-bucket/some/prefix at http://127.0.0.1:9"
    assert secret not in s3.describe() and secret not in repr(s3)

    for url in ["ftp://host/x", "/just/a/path", "file://relative/x", "s3://", "s3:///prefix"]:
        with pytest.raises(StorageConfigError, match="STORAGE_URL") as caught:
            open_store(url, tmp_path, env)
        assert secret not in str(caught.value)
    with pytest.raises(StorageConfigError) as caught:
        open_store("https://user:pw-in-url@host/x", tmp_path, env)
    assert "pw-in-url" not in str(caught.value)


async def test_s3_check_nothing_listening(tmp_path: Path) -> None:
    secret = "s3cr3t-" + secrets.token_hex(8)
    env = {
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{free_port()}",
        "AWS_ACCESS_KEY_ID": "someone",
        "AWS_SECRET_ACCESS_KEY": secret,
    }
    store = open_store("s3://bucket/prefix", tmp_path, env)
    with pytest.raises(StorageConfigError) as caught:
        await store.check()
    message = str(caught.value)
    assert "AWS_ENDPOINT_URL" in message and env["AWS_ENDPOINT_URL"] in message, message
    assert secret not in message


async def test_s3_check_wrong_secret(s3_server: S3Server, tmp_path: Path) -> None:
    wrong = "wrong-" + secrets.token_hex(8)
    store = open_store(s3_server.url, tmp_path, {**s3_server.env(), "AWS_SECRET_ACCESS_KEY": wrong})
    with pytest.raises(StorageConfigError) as caught:
        await store.check()
    message = str(caught.value)
    assert "AWS_SECRET_ACCESS_KEY" in message and "refused" in message, message
    assert wrong not in message and s3_server.secret not in message
    # Ordinary calls say the same, rather than looking like a missing object.
    with pytest.raises(StorageConfigError, match="AWS_ACCESS_KEY_ID"):
        await store.get("files/x")


async def test_s3_check_missing_bucket(s3_server: S3Server, tmp_path: Path) -> None:
    store = open_store("s3://no-such-bucket/x", tmp_path, s3_server.env())
    with pytest.raises(StorageConfigError, match="STORAGE_URL") as caught:
        await store.check()
    assert "no-such-bucket" in str(caught.value)


async def test_local_check_unusable_folder(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_bytes(b"")
    with pytest.raises(StorageConfigError, match="STORAGE_URL") as caught:
        await LocalStore(blocker / "store").check()
    assert str(blocker) in str(caught.value)
