"""Check what a GCP launch needs, without changing anything: `make doctor`.

    python scripts/doctor.py
    python scripts/doctor.py --key path/to/key.json     # another service-account key

1. the service-account JSON (.gcp-service-account.json): present, a service-account key;
2. a token minted from it with google-auth (in .venv-sky) - this is the network probe:
   with no route to Google it says so and skips the checks that need GCP;
3. `sky` installed (PATH or .venv-sky) and the gcloud CLI SkyPilot calls;
4. `sky check gcp` under scoped env vars only (GOOGLE_APPLICATION_CREDENTIALS,
   CLOUDSDK_AUTH_CREDENTIAL_FILE_OVERRIDE, CLOUDSDK_CORE_PROJECT, CLOUDSDK_CONFIG);
5. W8_GCP_IAP=1: the VPC W8_GCP_VPC admits tcp:22 only from IAP's 35.235.240.0/20 (its firewall
   rules read through the Compute API with the service account; harness.gcp_iap);
6. Daytona, one line each: DAYTONA_API_KEY set or not (never printed); the service reachable
   and the key accepted, or not (offline: "not reachable", not a failure); the network block
   confirmed or not: with the key accepted, a sandbox is created as a GRPO run creates it
   (network_block_all, ephemeral), checked (the service's report, a probe program's TCP connect
   and DNS lookup must fail) and deleted, the only thing doctor creates (`--no-daytona-probe` skips it).

Never runs `gcloud auth`, never edits gcloud config, never prints a key or token.
Ends with one line: k/n checks ok; exit 1 if a check failed.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.cloud import CloudError, key_path, load_service_account, mint_token, run_sky, sky_executable  # noqa: E402
from harness.config import ConfigError, load_config  # noqa: E402
from harness.gcp_iap import check_firewall, firewall_rules  # noqa: E402
from harness.daytona_faults import describe  # noqa: E402
from harness.sandbox_daytona import DaytonaBackend, check_service  # noqa: E402
from harness.sandbox_protocol import SandboxError  # noqa: E402

SKY_CHECK_TIMEOUT_S = 600  # the first sky call also starts SkyPilot's local API server (~1-2 min)


class Report:
    def __init__(self) -> None:
        self.results: list[bool] = []

    def line(self, ok: bool | None, name: str, text: str) -> None:
        """ok True/False counts; None is information (a skipped or optional check)."""
        mark = {True: "ok  ", False: "FAIL", None: "--  "}[ok]
        print(f"{mark} {name:<16} {text}", flush=True)
        if ok is not None:
            self.results.append(ok)


def check_key(report: Report, key_file: Path) -> bool:
    try:
        key = load_service_account(key_file)
    except CloudError as err:
        report.line(False, "service account", str(err))
        return False
    report.line(True, "service account", f"{key['client_email']} (project {key['project_id']}) from {key_file.name}")
    return True


def check_token(report: Report, key_file: Path) -> bool:
    """True when a token was minted (so Google is reachable)."""
    try:
        result = mint_token(key_file)
    except CloudError as err:
        report.line(False, "token", f"cannot mint: {err}")
        return False
    except subprocess.TimeoutExpired:
        report.line(False, "token", "no network: minting a token timed out (no route to Google?)")
        return False
    if result.get("ok"):
        report.line(True, "token", f"minted with google-auth, expires {result.get('expiry')}")
        return True
    if result.get("network"):
        report.line(False, "token", "no network: cannot reach Google's token endpoint from this machine "
                    f"({result.get('error', '')[:160]}); GCP checks skipped")
    else:
        report.line(False, "token", f"Google refused the key: {result.get('error', '')}")
    return False


def check_tools(report: Report) -> bool:
    try:
        sky = sky_executable()
    except CloudError as err:
        report.line(False, "sky", str(err))
        return False
    version = subprocess.run([sky, "--version"], capture_output=True, text=True, timeout=120).stdout.strip()
    report.line(True, "sky", f"{version or 'version unknown'} ({sky})")
    gcloud = shutil.which("gcloud")
    report.line(bool(gcloud), "gcloud CLI", gcloud or "not found: SkyPilot's GCP support calls `gcloud`; "
                "install the Google Cloud CLI")
    return bool(gcloud)


def check_sky_gcp(report: Report, key_file: Path) -> None:
    try:
        proc = run_sky(["check", "gcp"], sa_path=key_file, capture_output=True, text=True,
                       timeout=SKY_CHECK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        report.line(False, "sky check gcp", f"timed out after {SKY_CHECK_TIMEOUT_S}s")
        return
    except CloudError as err:
        report.line(False, "sky check gcp", str(err))
        return
    text = proc.stdout + proc.stderr
    enabled = "GCP: enabled" in text
    reason = next((line.strip() for line in text.splitlines() if "Details:" in line or "Reason" in line), "")
    if "No GCP account is activated" in text:
        reason = ("SkyPilot wants an active gcloud account (`gcloud auth list`), which scoped env vars "
                  "do not create; see README 'GCP service account'")
    report.line(enabled, "sky check gcp", "GCP enabled" if enabled else (reason or "GCP not enabled")[:300])


def check_iap(report: Report, online: bool) -> None:
    """W8_GCP_IAP=1: the VPC's firewall admits tcp:22 from IAP's range only (Compute API, service account)."""
    try:
        cfg = load_config()
    except ConfigError as err:
        report.line(False, "gcp iap", str(err))
        return
    if not cfg.gcp_iap:
        report.line(None, "gcp iap", "off: SkyPilot's default network opens tcp:22 to 0.0.0.0/0 (W8_GCP_IAP=1 "
                    "W8_GCP_VPC=<network> keeps SSH behind IAP)")
        return
    if not online:
        report.line(None, "gcp iap", f"VPC {cfg.gcp_vpc}: firewall not checked (no network to Google)")
        return
    try:
        problem, detail = check_firewall(firewall_rules(cfg.gcp_vpc), cfg.gcp_vpc)
    except (CloudError, subprocess.TimeoutExpired) as err:
        report.line(False, "gcp iap", f"cannot read VPC {cfg.gcp_vpc}'s firewall: {err}")
        return
    report.line(not problem, "gcp iap", problem or detail)


def check_daytona(report: Report, probe: bool = True) -> None:
    """Key, reachability, block: one line each; offline is information, a refused key or block a failure."""
    key = os.environ.get("DAYTONA_API_KEY", "")
    if not key:
        report.line(None, "daytona", "DAYTONA_API_KEY not set: the sandbox falls back to local processes "
                    "(optional)")
        return
    report.line(None, "daytona", "DAYTONA_API_KEY is set: make launch passes it as a SkyPilot secret; "
                "W8_SANDBOX=auto uses Daytona")
    reached, text = check_service(key)
    if reached is None:
        text += "; W8_SANDBOX=auto would run harness code locally, W8_SANDBOX=daytona would stop"
    report.line(reached, "daytona service", text)
    if not reached or not probe:
        report.line(None, "daytona block", "not confirmed: " + ("--no-daytona-probe" if reached else
                                                                "the service was not reached"))
        return
    backend = DaytonaBackend(api_key=key)
    try:
        backend.start()
        info = backend.info()
    except Exception as err:  # SandboxError says why in one line; anything else is described, masked
        why = str(err) if isinstance(err, SandboxError) else describe(err, key)
        report.line(False, "daytona block", f"not confirmed: {why}")
        return
    finally:
        backend.close()
    reached_nothing = " nor ".join(name.split(" ", 1)[1] for name in info["probe"])
    report.line(True, "daytona block", f"confirmed: sandbox {info['sandbox']} reported network_block_all and a probe "
                f"program reached neither {reached_nothing} (Python {info['python']}, {info['cpu']} CPU, "
                f"{info['memory_gib']:g} GiB: {info['slots']} program(s) at a time); deleted")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/doctor.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--key", type=Path, default=None,
                        help="service-account JSON [W8_GCP_KEY_FILE or .gcp-service-account.json]")
    parser.add_argument("--no-daytona-probe", action="store_true",
                        help="do not create a Daytona sandbox to confirm the network block")
    args = parser.parse_args(argv)
    args.key = args.key or key_path()
    report = Report()
    key_ok = check_key(report, args.key)
    online = key_ok and check_token(report, args.key)
    tools_ok = check_tools(report)
    if online and tools_ok:
        check_sky_gcp(report, args.key)
    else:
        report.line(None, "sky check gcp", "skipped: " + ("no network to Google" if key_ok else "no usable key"))
    check_iap(report, online)
    check_daytona(report, probe=not args.no_daytona_probe)
    ok = sum(report.results)
    print(f"doctor: {ok}/{len(report.results)} checks ok" + ("" if all(report.results) else " - see FAIL lines"))
    return 0 if all(report.results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
