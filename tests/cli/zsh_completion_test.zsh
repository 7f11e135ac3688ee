#!/usr/bin/env zsh
# zsh_completion_test.zsh SCRIPT BINDIRS (colon-separated): installs deploy/completions/_tandem as
# _tandemctl, _tandemd and _tandem-serve on a fresh fpath, starts an interactive zsh with compinit
# on a pseudo-terminal (zsh/zpty), types each line below followed by TAB, and checks the command
# line the completion left (a widget bound to ^B writes $BUFFER to a file).
emulate -L zsh
script=$1 bindirs=$2
dir=$(mktemp -d) || exit 1
trap 'zpty -d z 2>/dev/null; rm -rf $dir' EXIT
mkdir $dir/fpath
for p in tandemctl tandemd tandem-serve; do cp $script $dir/fpath/_$p; done
zmodload zsh/zpty || { echo "FAIL: zsh/zpty is not available"; exit 1; }
zpty z 'zsh -f -i' || exit 1
zpty -w z "unsetopt beep; fpath=($dir/fpath \$fpath); PATH=$bindirs:\$PATH; autoload -U compinit; compinit -u -D"
zpty -w z "dumpbuf() { print -r -- \"\$BUFFER\" > $dir/buf; BUFFER=''; }; zle -N dumpbuf; bindkey '^B' dumpbuf"
fail=0
completes() {  # completes TYPED WANT: TYPED then TAB must leave WANT on the command line
  rm -f $dir/buf
  zpty -w -n z "$1"$'\t\C-b'
  local i
  for i in {1..100}; do [[ -s $dir/buf ]] && break; sleep 0.1; done
  local got=$(<$dir/buf 2>/dev/null)
  if [[ $got != "$2" ]]; then
    print -r -- "FAIL: '$1<TAB>' gave '$got', not '$2'"
    fail=1
  fi
}
completes "tandemctl pl"             "tandemctl plan "
completes "tandemctl va"             "tandemctl validate "
completes "tandemctl pki i"          "tandemctl pki init "
completes "tandemctl validate --ou"  "tandemctl validate --output "
completes "tandemctl --log-level d"  "tandemctl --log-level debug "
completes "tandemctl plan -o j"      "tandemctl plan -o json "
completes "tandemd se"               "tandemd serve "
completes "tandem-serve --moe"       "tandem-serve --moe-backend "
(( fail )) || print "zsh completion: all 8 cases complete as expected"
exit $fail
