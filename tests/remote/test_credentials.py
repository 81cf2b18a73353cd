"""S3 credentials as AWS users give them: the standard environment variables (``AWS_PROFILE``,
``AWS_ENDPOINT_URL_S3``), boto's option names, and, when none is found, an error that says
where they come from instead of botocore's bare "Unable to locate credentials" (which is no
`OSError`, and escaped listings and saves as an internal error).

Every test here runs against moto on 127.0.0.1 with the instance metadata service disabled
and the shared config files pointed at nothing, so no credential lookup leaves the machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._optional import need
from tests.remote.conftest import burnpack_bytes
from weightstore import CredentialsMissingError, InvalidOptionError, Store, WeightstoreError
from weightstore.cli import main

need("fsspec")
s3fs = need("s3fs")

# What a user must be told, whichever way they reach S3.
HINTS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL_S3")
FLAGS = ("--storage-option key=", "--storage-option secret=", "anon=true")


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch, s3_endpoint: str) -> Iterator[str]:
    """An environment where boto finds no credentials anywhere and asks nothing off the
    machine: every AWS_* variable cleared, the metadata service off, the shared files empty.
    Yields the loopback endpoint."""
    for name in list(os.environ):
        if name.startswith("AWS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    s3fs.S3FileSystem.clear_instance_cache()  # a cached filesystem may hold earlier credentials
    yield s3_endpoint
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def model_url(s3_put: Callable[[str, bytes], str]) -> str:
    return s3_put("model.bpk", burnpack_bytes({"w": np.arange(6, dtype=np.float32)}))


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def _assert_hints(message: str) -> None:
    for hint in (*HINTS, *FLAGS):
        assert hint in message, (hint, message)


def test_a_read_without_credentials_says_where_they_come_from(
    model_url: str, no_credentials: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["inspect", model_url, "--storage-option", f"endpoint_url={no_credentials}"])
    err = _error_line(capsys)
    assert code == 2
    assert err.startswith(f"weightstore: error: {model_url}: no S3 credentials")
    _assert_hints(err)


def test_the_library_raises_a_typed_error(model_url: str, no_credentials: str) -> None:
    with pytest.raises(CredentialsMissingError) as caught:
        Store.from_file(model_url, storage_options={"endpoint_url": no_credentials})
    assert isinstance(caught.value, WeightstoreError) and isinstance(caught.value, PermissionError)
    assert caught.value.path == model_url
    assert "Unable to locate credentials" in caught.value.reason


def test_listing_a_folder_without_credentials_is_bad_input(
    model_url: str, no_credentials: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = model_url.rsplit("/", 1)[0] + "/"
    code = main(["inspect", folder, "--storage-option", f"endpoint_url={no_credentials}"])
    assert code == 2  # was 3: botocore's exception escaped the listing
    _assert_hints(_error_line(capsys))


def test_a_save_without_credentials_is_bad_input(
    model_url: str, no_credentials: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "m.bpk"
    source.write_bytes(burnpack_bytes({"w": np.ones(3, np.float32)}))
    target = model_url.rsplit("/", 1)[0] + "/out.safetensors"
    option = f"endpoint_url={no_credentials}"
    code = main(["convert", str(source), target, "--storage-option", option])
    assert code == 2  # was 3: botocore's exception escaped the existence check
    _assert_hints(_error_line(capsys))


def test_a_missing_profile_is_reported_the_same_way(
    model_url: str,
    no_credentials: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    code = main(["inspect", model_url, "--storage-option", f"endpoint_url={no_credentials}"])
    err = _error_line(capsys)
    assert code == 2 and "no-such-profile" in err
    _assert_hints(err)


def test_boto_option_names_are_accepted(
    model_url: str, no_credentials: str, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = [
        f"endpoint_url={no_credentials}",
        "aws_access_key_id=x",
        "aws_secret_access_key=x",
    ]
    args = [arg for flag in flags for arg in ("--storage-option", flag)]
    assert main(["inspect", model_url, "--json", *args]) == 0, capsys.readouterr().err
    assert '"format": "burnpack"' in capsys.readouterr().out


def test_an_option_given_under_both_names_is_refused(model_url: str, no_credentials: str) -> None:
    options: dict[str, Any] = {"endpoint_url": no_credentials, "key": "x", "aws_access_key_id": "x"}
    with pytest.raises(InvalidOptionError, match="'aws_access_key_id' and 'key'"):
        Store.from_file(model_url, storage_options=options)


@pytest.mark.parametrize("variable", ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"])
def test_the_endpoint_from_the_environment(
    variable: str,
    model_url: str,
    no_credentials: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "x")
    monkeypatch.setenv(variable, no_credentials)
    assert main(["inspect", model_url, "--json"]) == 0, capsys.readouterr().err
    assert '"format": "burnpack"' in capsys.readouterr().out


def test_credentials_from_a_profile(
    model_url: str,
    no_credentials: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    credentials = tmp_path / "credentials"
    credentials.write_text("[dev]\naws_access_key_id = x\naws_secret_access_key = x\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", "dev")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", no_credentials)
    assert main(["inspect", model_url, "--json"]) == 0, capsys.readouterr().err
    assert '"format": "burnpack"' in capsys.readouterr().out
