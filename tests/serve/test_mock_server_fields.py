"""The mock/emulated endpoint refuses request fields it would otherwise ignore: more than one
choice, and token ids below 0."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest

from hwtune.serve.mock_server import MODEL, MockServer


@pytest.fixture
def url():
    srv = MockServer()
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.url
    srv.shutdown()
    srv.server_close()


def _post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize(
    ("extra", "word"),
    [({"n": 2}, "n: got 2"), ({"best_of": 3}, "best_of 3"), ({"prompt": [1, -1]}, ">= 0")],
)
def test_refused_fields(url, extra: dict, word: str) -> None:
    body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2, "stream": True} | extra
    code, text = _post(url, body)
    assert code == 400 and word in text


def test_one_choice_still_streams(url) -> None:
    body = {"model": MODEL, "prompt": [1, 2, 3], "max_tokens": 2, "stream": True, "n": 1}
    code, text = _post(url, body)
    assert code == 200 and "[DONE]" in text
