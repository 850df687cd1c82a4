"""`Store` on an S3 bucket (AWS or any S3-protocol server) through obstore.

A single PUT (and a completed multipart upload) replaces an object atomically, so `put` needs
no temp object. Settings: STORAGE_URL=s3://bucket/optional/prefix plus AWS_ENDPOINT_URL
(optional), AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION (default us-east-1).
"""

from __future__ import annotations

import asyncio
import atexit
import errno
import os
import re
import time
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, timedelta
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import obstore
import obstore.store
from obstore.exceptions import BaseError, PermissionDeniedError, UnauthenticatedError

from knowledgeops.storage.store import (
    PendingFile,
    StorageConfigError,
    Store,
    StoredObject,
    StoredObjectMissing,
    check_key,
    check_prefix,
    deletable_prefix,
)

if TYPE_CHECKING:
    from obstore.store import ClientConfig, RetryConfig, S3Config

DEFAULT_REGION = "us-east-1"
_READ_CHUNK = 4 * 1024 * 1024
_PROBE_PREFIX = "_knowledgeops_check"
# check() must answer in seconds, not after obstore's default 10 retries over 3 minutes.
_PROBE_RETRY: RetryConfig = {"max_retries": 1, "retry_timeout": timedelta(seconds=10)}
_PROBE_CLIENT: ClientConfig = {"connect_timeout": timedelta(seconds=5), "timeout": "30s"}
_BUCKET_RE = re.compile(r"[a-z0-9][a-z0-9._-]{2,62}")  # S3 rules, plus legacy "_"
_REFUSED_CODES = ("SignatureDoesNotMatch", "InvalidAccessKeyId", "AccessDenied", "403 Forbidden")
_UNREACHABLE = ("error sending request", "Connect", "dns error", "timed out")
_SERVER_FAULTS = ("500 Internal", "502 Bad", "503 Service", "504 Gateway", "SlowDown")
# obstore's default retries a call for up to 3 minutes, unseen: give up sooner and let the
# outage handling (knowledgeops/runtime/outages.py) wait, with the task's checkpoint kept
# and its wait visible, instead of a step silently blocked.
_STORE_RETRY: RetryConfig = {"max_retries": 5, "retry_timeout": timedelta(seconds=20)}


def _let_tokio_finish() -> None:
    # obstore hands results back from its own (tokio) threads. One still doing so when the
    # interpreter finalises aborts the process (SIGABRT, seen in ~1 in 10 short runs); a
    # moment with the GIL released at exit lets it finish first.
    time.sleep(0.1)


atexit.register(_let_tokio_finish)


def parse_s3_url(url: str, setting: str = "STORAGE_URL") -> tuple[str, str]:
    """(bucket, prefix) of `s3://bucket/optional/prefix`; StorageConfigError if it is not one."""
    parts = urlsplit(url)
    accepted = "expected s3://bucket or s3://bucket/some/prefix"
    if parts.scheme != "s3":
        raise StorageConfigError(f"{setting} is not an s3:// URL: {accepted}")
    if "@" in parts.netloc:
        raise StorageConfigError(
            f"{setting} must not hold credentials: set AWS_ACCESS_KEY_ID and "
            "AWS_SECRET_ACCESS_KEY instead"
        )
    bucket = parts.netloc
    if not bucket:
        raise StorageConfigError(f"{setting}={url!r} names no bucket: {accepted}")
    if not _BUCKET_RE.fullmatch(bucket):
        raise StorageConfigError(
            f"{setting}={url!r}: {bucket!r} is not a bucket name (3-63 lowercase letters, "
            f"digits, '.', '-'); {accepted}"
        )
    if parts.query or parts.fragment:
        raise StorageConfigError(f"{setting}={url!r} has a '?' or '#' part: {accepted}")
    prefix = parts.path.strip("/")
    if prefix:
        try:
            check_key(prefix)
        except ValueError as exc:
            raise StorageConfigError(f"{setting}={url!r} has an unusable prefix: {exc}") from None
    return bucket, prefix


class S3Store(Store):
    def __init__(
        self, url: str, env: Mapping[str, str] | None = None, setting: str = "STORAGE_URL"
    ) -> None:
        """`env` (default os.environ) supplies the AWS_* settings. obstore also reads AWS_*
        variables from os.environ for anything `env` leaves unset."""
        env = os.environ if env is None else env
        self.setting = setting
        self.bucket, self.prefix = parse_s3_url(url, setting)
        self.endpoint = env.get("AWS_ENDPOINT_URL", "").strip().rstrip("/")
        self.region = env.get("AWS_REGION", "").strip() or DEFAULT_REGION
        key_id = env.get("AWS_ACCESS_KEY_ID", "").strip()
        self._secret = env.get("AWS_SECRET_ACCESS_KEY", "").strip()
        if bool(key_id) != bool(self._secret):
            given, missing = (
                ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
                if key_id
                else ("AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID")
            )
            raise StorageConfigError(f"{given} is set but {missing} is not: set both or neither")
        if "@" in urlsplit(self.endpoint).netloc:  # it would be shown in describe()
            raise StorageConfigError(
                "AWS_ENDPOINT_URL must not hold credentials: set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY instead"
            )
        if self.endpoint and not self.endpoint.startswith(("http://", "https://")):
            raise StorageConfigError(
                f"AWS_ENDPOINT_URL={self.endpoint!r} is not an http:// or https:// URL"
            )
        config: S3Config = {"region": self.region, "virtual_hosted_style_request": False}
        if self.endpoint:
            config["endpoint"] = self.endpoint
        if key_id:
            config["access_key_id"] = key_id
            config["secret_access_key"] = self._secret
        token = env.get("AWS_SESSION_TOKEN", "").strip()
        if token:
            config["session_token"] = token
        # obstore refuses plain-http endpoints unless told; local S3 servers are usually http.
        client: ClientConfig = {"allow_http": self.endpoint.startswith("http://")}
        try:
            self._store = obstore.store.S3Store(
                self.bucket,
                prefix=self.prefix or None,
                config=config,
                client_options=client,
                retry_config=_STORE_RETRY,
            )
            # A second client for check(): same settings, but it gives up within seconds.
            self._probe = obstore.store.S3Store(
                self.bucket,
                prefix=self.prefix or None,
                config=config,
                client_options={**client, **_PROBE_CLIENT},
                retry_config=_PROBE_RETRY,
            )
        except (BaseError, ValueError) as exc:
            raise StorageConfigError(
                f"cannot set up S3 storage for {self.describe()}: {self._text(exc)}. Check "
                f"{self.setting}, AWS_ENDPOINT_URL and AWS_REGION"
            ) from None

    def describe(self) -> str:
        where = f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"
        return f"{where} at {self.endpoint or f'AWS S3 ({self.region})'}"

    def __repr__(self) -> str:
        return f"S3Store({self.describe()})"

    async def put(self, key: str, data: bytes) -> None:
        k = check_key(key)
        with self._translated(k, writing=True):
            await obstore.put_async(self._store, k, data)

    async def put_file(self, key: str, path: Path) -> None:
        k = check_key(key)
        # obstore's own error for a missing file names no path: say which one is missing.
        if not await asyncio.to_thread(path.is_file):
            raise FileNotFoundError(errno.ENOENT, "no file to store under " + repr(k), str(path))
        with self._translated(k, writing=True):  # obstore reads the file, multipart if large
            await obstore.put_async(self._store, k, path)

    async def get(self, key: str) -> bytes:
        k = check_key(key)
        with self._translated(k):
            result = await obstore.get_async(self._store, k)
            return bytes(await result.bytes_async())

    async def get_file(self, key: str, path: Path) -> None:
        k = check_key(key)
        with self._translated(k):
            result = await obstore.get_async(self._store, k)
        # Created only once the object is known to exist: a miss leaves nothing behind.
        pending = await asyncio.to_thread(PendingFile, path)
        try:
            with self._translated(k):
                async for chunk in result.stream(min_chunk_size=_READ_CHUNK):
                    await asyncio.to_thread(pending.write, chunk)
            await asyncio.to_thread(pending.commit)
        except BaseException:
            pending.discard()
            raise

    async def exists(self, key: str) -> bool:
        return await self.size(key) is not None

    async def size(self, key: str) -> int | None:
        k = check_key(key)
        try:
            with self._translated(k):
                meta = await obstore.head_async(self._store, k)
        except StoredObjectMissing:
            return None
        return meta["size"]

    async def list(self, prefix: str) -> list[StoredObject]:
        bare = check_prefix(prefix)
        with self._translated(bare or "(all)"):
            metas = await obstore.list(self._store, bare or None).collect_async()
        found = [
            StoredObject(m["path"], m["size"], m["last_modified"].astimezone(UTC)) for m in metas
        ]
        return sorted(found, key=lambda o: o.key)

    async def delete(self, key: str) -> None:
        k = check_key(key)
        try:
            with self._translated(k):
                await obstore.delete_async(self._store, k)
        except StoredObjectMissing:
            return  # S3 answers a missing key with success; some servers with 404: both done

    async def delete_prefix(self, prefix: str) -> int:
        keys = [o.key for o in await self.list(deletable_prefix(prefix))]
        if keys:
            with self._translated(prefix):  # obstore batches these into DeleteObjects calls
                await obstore.delete_async(self._store, keys)
        return len(keys)

    async def check(self) -> None:
        probe = f"{_PROBE_PREFIX}/{uuid.uuid4().hex}"
        data = b"knowledgeops storage check\n"
        try:
            await obstore.put_async(self._probe, probe, data)
            got = bytes(await (await obstore.get_async(self._probe, probe)).bytes_async())
            await obstore.delete_async(self._probe, probe)
        except (BaseError, OSError) as exc:
            raise self._config_error(exc) from None
        if got != data:
            raise StorageConfigError(
                f"S3 storage at {self.describe()} returned different bytes than were written "
                "to it; check that AWS_ENDPOINT_URL points at a real S3 server"
            )

    @contextmanager
    def _translated(self, key: str, *, writing: bool = False) -> Iterator[None]:
        """obstore's errors as ours: a missing key, or a setting to fix. Others (network
        trouble that outlasted obstore's retries) pass through for the caller to retry.
        `writing`: a not-found is then about the local file being uploaded, not the key."""
        try:
            yield
        except FileNotFoundError as exc:
            if "NoSuchBucket" in str(exc):
                raise self._config_error(exc) from None
            if writing:
                raise
            raise StoredObjectMissing(key, self.describe()) from None
        except BaseError as exc:
            if _refused(exc):
                raise self._config_error(exc) from None
            raise

    def _config_error(self, exc: BaseException) -> StorageConfigError:
        where = self.describe()
        reason = self._text(exc)
        if isinstance(exc, FileNotFoundError):
            fix = (
                f"the bucket {self.bucket!r} does not exist there: create it, or fix the bucket "
                f"in {self.setting} (or AWS_ENDPOINT_URL, if this is the wrong server)"
            )
        elif _refused(exc):
            fix = (
                "the server refused the credentials: check AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (and AWS_REGION on AWS), and that this key may use "
                f"the bucket in {self.setting}"
            )
        elif any(s in reason for s in _UNREACHABLE):
            fix = (
                f"cannot reach {self.endpoint or 'AWS S3'}: check AWS_ENDPOINT_URL (scheme, "
                "host and port) and that the S3 server is running and reachable from here"
            )
        else:
            fix = (
                f"check {self.setting}, AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, "
                "AWS_SECRET_ACCESS_KEY and AWS_REGION"
            )
        return StorageConfigError(
            f"{self.setting}: S3 storage at {where} is not usable: {fix}. ({reason})"
        )

    def _text(self, exc: BaseException) -> str:
        """obstore's message, one line, without its debug dump and with no secret in it."""
        text = str(exc).split("\n\nDebug source:")[0]
        code = re.search(r"<Code>([^<]+)</Code>", text)
        text = re.sub(r"<\?xml.*", "", text, flags=re.S)  # the XML body: its <Code> is enough
        text = " ".join(text.split())
        if code:
            text = f"{text} {code.group(1)}"
        if self._secret:
            text = text.replace(self._secret, "***")
        return text[:400]


OBJECT_STORE_ERRORS: tuple[type[Exception], ...] = (BaseError,)


def object_store_unreachable(exc: BaseException) -> bool:
    """Whether obstore gave up on the server itself (no answer, or a 5xx after its retries), as
    opposed to refusing a setting or missing a key: an outage to wait out, not a bug."""
    if not isinstance(exc, BaseError) or isinstance(exc, FileNotFoundError) or _refused(exc):
        return False
    text = str(exc).split("\n\nDebug source:")[0]
    return any(s in text for s in (*_UNREACHABLE, *_SERVER_FAULTS))


def _refused(exc: BaseException) -> bool:
    if isinstance(exc, PermissionDeniedError | UnauthenticatedError):
        return True
    text = str(exc)  # list errors arrive as GenericError; only the status says "refused"
    return any(code in text for code in _REFUSED_CODES)
