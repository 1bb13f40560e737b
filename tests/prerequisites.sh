# Sourced by tests/run and tests/wheel/check.sh: checks the commands a
# script needs and, where some are missing, installs their Debian packages
# with apt-get when running as root, or else names them in one line with the
# apt-get command and exits with status 2.
#
#   require WHO CHECK:PACKAGE ...
#
# Each CHECK is a command name, or a shell condition in braces
# ('{python3 -c "import venv"}'), and PACKAGE provides it.
#
# The same for the Python packages the tests import, which come from PyPI
# and are installed with pip into the python3 on PATH:
#
#   require_python WHO MODULE:PACKAGE ...

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

require_python() {
    local who=$1 check
    shift
    local -a missing=()
    for check in "$@"; do
        python3 -c "import ${check%%:*}" >/dev/null 2>&1 || missing+=("${check##*:}")
    done
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" -eq 0 ]; then
        echo "$who: installing the Python packages ${missing[*]}" >&2
        # Debian's own python3 refuses pip installs unless told to: a test
        # machine's, where the tests are what it is for.
        python3 -m pip install -q "${missing[@]}" >&2 ||
            python3 -m pip install -q --break-system-packages "${missing[@]}" >&2 || {
            echo "$who: pip could not install ${missing[*]}" >&2
            exit 2
        }
        return 0
    fi
    echo "$who: missing the Python packages ${missing[*]}; install with: python3 -m pip install ${missing[*]}" >&2
    exit 2
}
