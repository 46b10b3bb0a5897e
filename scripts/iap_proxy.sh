#!/usr/bin/env bash
# SSH ProxyCommand for W8_GCP_IAP=1 launches: SkyPilot's gcp.ssh_proxy_command calls it with the node's
# internal IP and port (%h %p); it finds the instance with that IP in the project and opens an IAP TCP
# forwarding tunnel to it on stdin/stdout. harness/gcp_iap.py renders the call with the scoped
# CLOUDSDK_* variables (the service-account key's path, the project, a private gcloud config), so the
# user's gcloud config is never used or changed.
#
#   bash scripts/iap_proxy.sh 10.128.0.7 22
set -euo pipefail
HOST="${1:?usage: iap_proxy.sh <internal IP> <port>}"
PORT="${2:?usage: iap_proxy.sh <internal IP> <port>}"
read -r NAME ZONE < <(gcloud compute instances list --quiet \
  --filter="networkInterfaces.networkIP=$HOST" --format="value(name,zone.basename())" | head -1) || true
if [ -z "${NAME:-}" ] || [ -z "${ZONE:-}" ]; then
  echo "error: iap_proxy: no instance with internal IP $HOST in project ${CLOUDSDK_CORE_PROJECT:-?}" >&2
  exit 1
fi
exec gcloud compute start-iap-tunnel "$NAME" "$PORT" --listen-on-stdin --zone "$ZONE" --verbosity=warning
