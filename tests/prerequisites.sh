# Sourced by tests/run and tests/wheel/check.sh: checks the commands a
# script needs and, where some are missing, installs their Debian packages
# with apt-get when running as root, or else names them in one line with the
# apt-get command and exits with status 2.
#
#   require WHO CHECK:PACKAGE ...
#
# Each CHECK is a command name, or a shell condition in braces
# ('{python3 -c "import venv"}'), and PACKAGE provides it.

# Prints the packages whose check fails, once each.
missing_packages() {
    local check package condition
    local -a missing=()
    for check in "$@"; do
        package=${check##*:}
        condition=${check%:*}
        if [[ $condition == \{*\} ]]; then
            condition=${condition#\{}
            condition=${condition%\}}
            bash -c "$condition" >/dev/null 2>&1 && continue
        else
            command -v "$condition" >/dev/null 2>&1 && continue
        fi
        [[ " ${missing[*]} " == *" $package "* ]] || missing+=("$package")
    done
    echo "${missing[*]}"
}

require() {
    local who=$1
    shift
    local -a missing
    read -r -a missing <<<"$(missing_packages "$@")"
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "$who: installing ${missing[*]}" >&2
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
        read -r -a missing <<<"$(missing_packages "$@")"
        [ ${#missing[@]} -eq 0 ] && return 0
        echo "$who: still missing after apt-get install: ${missing[*]}" >&2
        exit 2
    fi
    echo "$who: missing ${missing[*]}; install with: sudo apt-get install -y ${missing[*]}" >&2
    exit 2
}
