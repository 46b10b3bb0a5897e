"""SSH without broad ingress: launches through IAP TCP forwarding (W8_GCP_IAP=1, W8_GCP_VPC=<network>).

    python -m harness.gcp_iap validate CONFIG.yaml          # in .venv-sky: SkyPilot's own config schema
    python -m harness.gcp_iap firewalls KEY.json PROJECT VPC  # in .venv-sky: the VPC's firewall rules (API)

SkyPilot's default GCP network setup opens tcp:22 to 0.0.0.0/0 (its FIREWALL_RULES_REQUIRED). In
IAP mode the launch instead uses SkyPilot's own GCP config keys, in a config file of ours handed
to `sky` through SKYPILOT_PROJECT_CONFIG (the user's ~/.sky/config.yaml and gcloud config are
never touched):
  gcp.vpc_name           the user's VPC, whose firewall admits tcp:22 only from IAP's range
                         35.235.240.0/20 (SkyPilot checks no firewall on a VPC it is given);
  gcp.use_internal_ips   nodes get no external IP;
  gcp.ssh_proxy_command  `gcloud compute start-iap-tunnel` through scripts/iap_proxy.sh, under the
                         scoped credentials (the key file's path, never its content).
`make dry-run` validates the rendered file with SkyPilot's schema; `make doctor` reads the VPC's
firewall through the Compute API with the service account (check_firewall). The service account
needs roles/iap.tunnelResourceAccessor; the VPC needs a subnet in the launch's region, an
ingress rule for tcp:22 from 35.235.240.0/20 and, for several nodes, one for traffic between
the nodes; the nodes need Cloud NAT (or Private Google Access) to reach PyPI, GitHub and the HF
hub without external IPs. Not exercised against GCP from this repo yet (no network here).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping

from harness.cloud import CloudError, key_path, load_service_account, sky_python
from harness.files import REPO_ROOT, WORK_DIR

IAP_RANGE = "35.235.240.0/20"  # Google's IAP TCP forwarding source range (cloud.google.com/iap/docs/using-tcp-forwarding)
PRIVATE = tuple(ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"))  # RFC 1918
CONFIG_PATH = WORK_DIR / "sky-iap.yaml"
PROXY = REPO_ROOT / "scripts" / "iap_proxy.sh"


def sky_config(vpc: str, project: str, key_file: Path, gcloud_dir: Path) -> dict[str, Any]:
    """SkyPilot's config (gcp section) for an IAP launch into `vpc`."""
    scoped = {"CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE": str(Path(key_file).resolve()),
              "CLOUDSDK_CORE_PROJECT": project, "CLOUDSDK_CONFIG": str(Path(gcloud_dir).resolve())}
    proxy = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in scoped.items()) + f" bash {shlex.quote(str(PROXY))} %h %p"
    return {"gcp": {"vpc_name": vpc, "use_internal_ips": True, "ssh_proxy_command": proxy}}


def write_config(vpc: str, gcloud_dir: Path, path: Path = CONFIG_PATH) -> Path:
    """The IAP config file (JSON, which is YAML) for the key in use; CloudError if the key is unusable."""
    key = load_service_account()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(sky_config(vpc, key["project_id"], key_path(), gcloud_dir), indent=1) + "\n")
    return path


def validate(path: Path, timeout_s: float = 180) -> str:
    """SkyPilot's own config schema on the file (in .venv-sky); '' if it passes, else its one-line rejection."""
    home = WORK_DIR / "sky-home"  # importing sky creates ~/.sky: keep it private
    home.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sky_python(), "-m", "harness.gcp_iap", "validate", str(path)], cwd=REPO_ROOT,
                          env={"PATH": os.environ.get("PATH", ""), "HOME": str(home), "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=timeout_s)
    if proc.returncode == 0:
        return ""
    return (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines() or ["no output"])[-1]


# ---- the VPC's firewall ---------------------------------------------------------------------------------
def _opens_ssh(rule: Mapping[str, Any]) -> bool:
    """An enabled ingress allow rule that admits tcp:22 (all protocols, all tcp ports or a range holding 22)."""
    if rule.get("direction", "INGRESS") != "INGRESS" or rule.get("disabled") or "allowed" not in rule:
        return False
    for allowed in rule["allowed"]:
        if allowed.get("IPProtocol") not in ("tcp", "all"):
            continue
        ports = allowed.get("ports") or ["0-65535"]
        for port in ports:
            low, _, high = str(port).partition("-")
            if int(low) <= 22 <= int(high or low):
                return True
    return False


def check_firewall(rules: list[Mapping[str, Any]], vpc: str) -> tuple[str, str]:
    """(problem or '', detail) for a VPC's firewall rules (the Compute API's firewalls list of that network)."""
    ssh = [r for r in rules if _opens_ssh(r)]
    iap = ipaddress.ip_network(IAP_RANGE)
    # from IAP's range or from private ranges (the nodes' own subnet: Ray and SkyPilot between nodes) is fine
    broad = [f"{r.get('name')} ({', '.join(r.get('sourceRanges') or ['tags/accounts'])})" for r in ssh
             if not r.get("sourceRanges") or any(not (ipaddress.ip_network(s).subnet_of(iap)
                                                      or any(ipaddress.ip_network(s).subnet_of(p) for p in PRIVATE))
                                                  for s in r.get("sourceRanges", []))]
    ssh = [r for r in ssh if any(ipaddress.ip_network(s).subnet_of(iap) for s in r.get("sourceRanges", []))]
    if broad:
        return (f"VPC {vpc} admits tcp:22 from beyond IAP's {IAP_RANGE}: {'; '.join(broad)}; restrict those "
                f"rules to {IAP_RANGE}"), ""
    if not ssh:
        return (f"VPC {vpc} has no ingress rule for tcp:22 from {IAP_RANGE}: SkyPilot cannot reach the nodes; "
                f"gcloud compute firewall-rules create allow-iap-ssh --network {vpc} --allow tcp:22 "
                f"--source-ranges {IAP_RANGE}"), ""
    return "", f"VPC {vpc}: tcp:22 only from IAP's {IAP_RANGE} ({', '.join(str(r.get('name')) for r in ssh)})"


def firewall_rules(vpc: str, timeout_s: float = 120) -> list[dict]:
    """The VPC's firewall rules through the Compute API with the service account (in .venv-sky)."""
    key = load_service_account()
    proc = subprocess.run([sky_python(), "-m", "harness.gcp_iap", "firewalls", str(key_path().resolve()),
                           key["project_id"], vpc], cwd=REPO_ROOT, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                          capture_output=True, text=True, timeout=timeout_s)
    lines = proc.stdout.strip().splitlines()
    if proc.returncode != 0 or not lines:
        raise CloudError((proc.stderr.strip().splitlines() or ["no output"])[-1])
    result = json.loads(lines[-1])
    if "error" in result:
        raise CloudError(result["error"])
    return result["rules"]


# ---- run inside .venv-sky ------------------------------------------------------------------------------
def _validate_in_sky_env(path: str) -> int:
    import yaml
    from sky.utils import common_utils, schemas

    try:
        common_utils.validate_schema(yaml.safe_load(Path(path).read_text()), schemas.get_config_schema(),
                                     f"Invalid SkyPilot config {Path(path).name}: ")
    except ValueError as err:
        print(" ".join(str(err).split())[:400])
        return 1
    return 0


def _firewalls_in_sky_env(key_file: str, project: str, vpc: str) -> int:
    from google.auth import exceptions
    from google.auth.transport.requests import AuthorizedSession
    from google.oauth2 import service_account

    url = f"https://compute.googleapis.com/compute/v1/projects/{project}/global/firewalls"
    try:
        creds = service_account.Credentials.from_service_account_file(
            key_file, scopes=["https://www.googleapis.com/auth/compute.readonly"])
        response = AuthorizedSession(creds).get(url, params={"filter": f'network="https://www.googleapis.com/compute/'
                                                                       f'v1/projects/{project}/global/networks/{vpc}"'},
                                                timeout=60)
        if response.status_code != 200:
            result = {"error": f"Compute API {response.status_code} for {url}: {response.text[:200]}"}
        else:
            result = {"rules": response.json().get("items", [])}
    except (exceptions.GoogleAuthError, OSError, ValueError) as err:
        result = {"error": f"{type(err).__name__}: {' '.join(str(err).split())[:200]}"}
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    args = sys.argv[1:]
    if args[:1] == ["validate"] and len(args) == 2:
        raise SystemExit(_validate_in_sky_env(args[1]))
    if args[:1] == ["firewalls"] and len(args) == 4:
        raise SystemExit(_firewalls_in_sky_env(*args[1:]))
    print("usage: python -m harness.gcp_iap validate CONFIG | firewalls KEY PROJECT VPC", file=sys.stderr)
    raise SystemExit(2)
