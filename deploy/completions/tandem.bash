# bash completion for tandemctl, tandemd and tandem-serve (installed under each name into
# bash-completion's completions directory). Verbs and flags are read from the program's own
# --help at completion time, so the completion never falls out of step with the binary.

# _tandem_help_words PROGRAM [VERB...]: the flags and verbs `PROGRAM VERB... --help` lists.
_tandem_help_words() {
  local section="" line word
  while IFS= read -r line; do
    case "$line" in
      Options:*|"HTTP limits:"*) section=options; continue ;;
      Subcommands:*) section=verbs; continue ;;
      "") continue ;;
    esac
    [[ $line == "  "* ]] || { section=""; continue; }
    line=${line#"${line%%[![:space:]]*}"}
    case $section in
      options)
        # "-o,--output TEXT:{text,json} ..." -> -o --output
        word=${line%%[[:space:]]*}
        word=${word//,/ }
        printf '%s\n' $word ;;
      verbs) printf '%s\n' "${line%%[[:space:]]*}" ;;
    esac
  done < <("$@" --help 2>/dev/null)
}

_tandem_complete() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local prog=${COMP_WORDS[0]}
  case $prev in
    -o|--output|--log-format) COMPREPLY=($(compgen -W "text json" -- "$cur")); return ;;
    --log-level) COMPREPLY=($(compgen -W "trace debug info warn error off" -- "$cur")); return ;;
  esac
  # The verbs typed so far (words that are verbs of the level above them).
  local -a path=("$prog")
  local i w words
  for ((i = 1; i < COMP_CWORD; i++)); do
    w=${COMP_WORDS[i]}
    [[ $w == -* ]] && continue
    words=$(_tandem_help_words "${path[@]}")
    grep -qx -- "$w" <<<"$words" && path+=("$w")
  done
  words=$(_tandem_help_words "${path[@]}")
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(grep -- '^-' <<<"$words")" -- "$cur"))
  else
    local verbs
    verbs=$(grep -v -- '^-' <<<"$words")
    if [[ -n $verbs ]]; then
      COMPREPLY=($(compgen -W "$verbs" -- "$cur"))
    else
      COMPREPLY=($(compgen -f -- "$cur"))  # a verb's arguments: manifests, directories
      compopt -o filenames 2>/dev/null
    fi
  fi
}

complete -F _tandem_complete tandemctl tandemd tandem-serve
