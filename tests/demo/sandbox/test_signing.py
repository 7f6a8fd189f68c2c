"""The Sandbox-Signature helpers: round trip, tampering, freshness, rotation."""

import hashlib
import hmac
import time

import pytest

from demo.sandbox import signing

BODY = b'{"notify_id":"N1","trade_status":"SUCCESS"}'
SECRETS = ["whsec-test"]


def test_a_signature_verifies_over_the_same_body():
    header = signing.sign(body=BODY, secrets=SECRETS)

    assert header.startswith("t=")
    assert header.count("v1=") == 1
    assert signing.verify(header=header, body=BODY, secrets=SECRETS)


def test_the_digest_is_hmac_sha256_over_t_dot_body():
    header = signing.sign(body=b"{}", secrets=["k"], timestamp=1700000000)

    expected = hmac.new(b"k", b"1700000000.{}", hashlib.sha256).hexdigest()
    assert header == f"t=1700000000,v1={expected}"


@pytest.mark.parametrize(
    "body", [BODY + b" ", BODY.replace(b"SUCCESS", b"CLOSED"), b""], ids=["space", "value", "empty"]
)
def test_a_tampered_body_fails(body):
    header = signing.sign(body=BODY, secrets=SECRETS)

    assert not signing.verify(header=header, body=body, secrets=SECRETS)


def test_a_tampered_signature_or_a_wrong_secret_fails():
    header = signing.sign(body=BODY, secrets=SECRETS)
    flipped = header[:-1] + ("0" if header[-1] != "0" else "1")

    assert not signing.verify(header=flipped, body=BODY, secrets=SECRETS)
    assert not signing.verify(header=header, body=BODY, secrets=["another-secret"])


@pytest.mark.parametrize(
    ("skew", "valid"), [(-301, False), (-299, True), (299, True), (301, False)]
)
def test_the_timestamp_must_be_within_300_seconds_either_way(skew, valid):
    now = time.time()
    header = signing.sign(body=BODY, secrets=SECRETS, timestamp=int(now) + skew)

    assert signing.verify(header=header, body=BODY, secrets=SECRETS, now=now) is valid


def test_rotation_signs_with_every_secret_and_either_one_verifies():
    header = signing.sign(body=BODY, secrets=["old-secret", "new-secret"])

    assert header.count("v1=") == 2
    assert signing.verify(header=header, body=BODY, secrets=["old-secret"])
    assert signing.verify(header=header, body=BODY, secrets=["new-secret"])
    assert signing.verify(header=header, body=BODY, secrets=["new-secret", "old-secret"])
    assert not signing.verify(header=header, body=BODY, secrets=["retired-secret"])


@pytest.mark.parametrize(
    "header",
    [None, "", "garbage", "t=abc,v1=00", "v1=00", f"t={int(time.time())}", "t=-5,v1=00"],
)
def test_a_malformed_header_fails(header):
    assert not signing.verify(header=header, body=BODY, secrets=SECRETS)


def test_signing_without_a_secret_is_refused():
    with pytest.raises(ValueError, match="secret"):
        signing.sign(body=BODY, secrets=[])


def test_configured_secrets_split_the_comma_separated_setting(settings):
    settings.SANDBOX_WEBHOOK_SECRET = " new-secret , old-secret ,"

    assert signing.configured_secrets() == ["new-secret", "old-secret"]
