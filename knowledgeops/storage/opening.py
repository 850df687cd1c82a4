"""Opening the store STORAGE_URL names: a local folder by default, or an S3 bucket."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import unquote, urlsplit

from knowledgeops.storage.local import LocalStore
from knowledgeops.storage.store import StorageConfigError, Store

ACCEPTED = (
    "use s3://bucket or s3://bucket/prefix (the server and keys come from AWS_ENDPOINT_URL, "
    "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION), file:///absolute/folder, or leave "
    "{setting} empty"
)


def check_url(url: str, setting: str = "STORAGE_URL") -> str:
    """`url` if it is a storage URL this opens (checked without connecting), else
    StorageConfigError naming `setting`."""
    url = url.strip()
    scheme = url.partition(":")[0].lower()
    if not url:
        return url
    if scheme == "s3":
        from knowledgeops.storage.s3 import parse_s3_url

        parse_s3_url(url, setting)
    elif scheme == "file":
        _file_path(url, setting)
    else:
        raise StorageConfigError(
            f"{setting}={_shown(url)!r} is not a storage URL: {ACCEPTED.format(setting=setting)}"
        )
    return url


def open_store(
    url: str,
    local_root: Path,
    env: Mapping[str, str] | None = None,
    setting: str = "STORAGE_URL",
) -> Store:
    """`url` is the value of `setting`; `local_root` is used when it is empty; `env`
    (default os.environ) holds the AWS_* settings."""
    url = check_url(url, setting)
    if not url:
        return LocalStore(local_root)
    if url.lower().startswith("s3:"):
        from knowledgeops.storage.s3 import S3Store  # obstore is only loaded when used

        return S3Store(url, env, setting)
    return LocalStore(_file_path(url, setting))


def _file_path(url: str, setting: str) -> Path:
    parts = urlsplit(url)
    path = Path(unquote(parts.path))
    if (
        parts.netloc not in ("", "localhost")
        or not path.is_absolute()
        or not url.startswith("file:/")
    ):
        raise StorageConfigError(
            f"{setting}={_shown(url)!r} is not a file URL of an absolute folder: write "
            "file:///absolute/folder (three slashes)"
        )
    if ".." in path.parts:
        raise StorageConfigError(f"{setting}={url!r}: write the folder without '..' parts")
    return path


def _shown(url: str) -> str:
    """The URL without any user:password part, fit for a message."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]).geturl()
