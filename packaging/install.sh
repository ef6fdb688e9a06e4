#!/bin/sh
# Installs cryo from this checkout in one build: cryod (with cryod-launch,
# its sessions' small launcher), cryoctl and cryo-agent go where `cargo install` puts programs ($CARGO_HOME/bin,
# ~/.cargo/bin by default). The build is the README's `cargo build
# --release`, so after the demo nothing is built twice; three `cargo
# install`s would build the shared dependencies three times. CRYO_INSTALL_DIR
# names another folder.
set -eu
cd "$(dirname "$0")/.."
cargo build --release --locked
dest="${CRYO_INSTALL_DIR:-${CARGO_HOME:-$HOME/.cargo}/bin}"
mkdir -p "$dest"
# cryod before its launcher: a running cryod whose binary was replaced
# starts no session (it says to restart it), so it never runs a newer
# launcher than its own.
for b in cryod cryod-launch cryoctl cryo-agent; do
  # A new file renamed over the old: a running cryod keeps its own.
  install -m 0755 "target/release/$b" "$dest/.$b.new"
  mv -f "$dest/.$b.new" "$dest/$b"
done
if ! said=$("$dest/cryoctl" completions install 2>&1); then
  echo "note: no shell completions or man pages: $said"
fi
echo "installed cryod, cryod-launch, cryoctl and cryo-agent in $dest"
case ":$PATH:" in
  *":$dest:"*) ;;
  *) echo "note: $dest is not on PATH: add it, or run $dest/cryoctl" ;;
esac
