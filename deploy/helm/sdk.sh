# Sourced by deploy/render.sh and deploy/check.sh: puts PyPI's helm-python-sdk (Helm 4 as a
# library, pinned) on PYTHONPATH, installed once with `pip --target` into
# $SOCKWATCH_CHECK_CACHE/helm (default /var/cache/sockwatch-deploy-check/helm); a stamp file
# names the version, so a new pin reinstalls.
helm_sdk_package="helm-python-sdk==0.2.2"

helm_sdk_setup() {
    local cache="${SOCKWATCH_CHECK_CACHE:-/var/cache/sockwatch-deploy-check}"
    local dir="$cache/helm"
    local stamp
    stamp="$dir/.installed-$(echo "$helm_sdk_package" | sha256sum | cut -c1-16)"
    if [[ ! -e $stamp ]]; then
        echo "installing $helm_sdk_package into $dir" >&2
        rm -rf "$dir"
        mkdir -p "$cache" || return 1
        # The wheel bundles the native library; an sdist would need Go to build it.
        python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
            --only-binary=:all: --target "$dir" "$helm_sdk_package" || return 1
        touch "$stamp"
    fi
    export PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
}
