"""IAP mode: SkyPilot's own GCP config keys checked by SkyPilot's schema, and the VPC firewall rule check on fake
firewall listings (the Compute API is unreachable here; the listings have the API's shape)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import gcp_iap

REPO = Path(__file__).resolve().parent.parent
SKY_PY = REPO / ".venv-sky" / "bin" / "python"
needs_sky_env = pytest.mark.skipif(not SKY_PY.exists(), reason="make sky-env builds .venv-sky")


def rule(name, sources, ports=("22",), protocol="tcp", **extra):
    return {"name": name, "direction": "INGRESS", "sourceRanges": list(sources),
            "allowed": [{"IPProtocol": protocol, **({"ports": list(ports)} if ports else {})}], **extra}


INTERNAL = rule("allow-internal", ["10.128.0.0/9"], ports=("0-65535",))


@pytest.mark.parametrize("fake_gcp_firewall, problem", [
    ([rule("allow-iap-ssh", ["35.235.240.0/20"]), INTERNAL], ""),
    ([rule("allow-iap-ssh", ["35.235.240.0/20"]), rule("sky-ssh", ["0.0.0.0/0"])],
     "VPC v admits tcp:22 from beyond IAP's 35.235.240.0/20: sky-ssh (0.0.0.0/0)"),
    ([rule("all-tcp", ["0.0.0.0/0"], ports=None)], "VPC v admits tcp:22 from beyond IAP's 35.235.240.0/20: all-tcp"),
    ([rule("range", ["8.8.8.0/24"], ports=("20-30",))], "VPC v admits tcp:22 from beyond IAP's"),
    ([rule("internal-and-iap", ["10.0.0.0/8", "35.235.240.0/20"])], ""),
    ([rule("everything", ["0.0.0.0/0"], ports=None, protocol="all")], "VPC v admits tcp:22 from beyond IAP's"),
    ([rule("sky-ssh", ["0.0.0.0/0"], disabled=True), rule("allow-iap-ssh", ["35.235.240.0/20"])], ""),
    ([INTERNAL, rule("web", ["0.0.0.0/0"], ports=("443",))], "VPC v has no ingress rule for tcp:22 from 35.235.240.0/20"),
    ([], "VPC v has no ingress rule for tcp:22"),
])
def test_check_firewall_on_fake_gcp_firewall_listings(fake_gcp_firewall, problem):
    found, detail = gcp_iap.check_firewall(fake_gcp_firewall, "v")
    assert found.startswith(problem) if problem else (found == "" and "tcp:22 only from IAP's" in detail)


@needs_sky_env
@pytest.mark.slow  # over 5 s on 2 cores: runs in make test-slow
def test_the_iap_config_passes_skypilots_schema_and_a_bad_one_is_named(tmp_path):
    good = tmp_path / "iap.yaml"
    good.write_text(json.dumps(gcp_iap.sky_config("w8-iap", "demo-project", tmp_path / "key.json", tmp_path / "gc")))
    assert gcp_iap.validate(good) == ""
    bad = tmp_path / "bad.yaml"
    bad.write_text(json.dumps({"gcp": {"vpc_name": "Not_A_VPC", "use_internal_ips": True}}))
    assert gcp_iap.validate(bad).startswith("Invalid SkyPilot config bad.yaml: 'Not_A_VPC' does not match")
