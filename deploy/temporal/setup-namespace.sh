#!/bin/sh
# One-shot, once the server is healthy: the namespace and the search attributes knowledgeops
# sets on every task (the worker registers them too, if this has not run). Safe to run again,
# and every real error stops it with the tool's own message: nothing's output is thrown away.
set -eu
address=${TEMPORAL_ADDRESS:-temporal:7233}
namespace=${TEMPORAL_NAMESPACE:-default}
attempts=${TEMPORAL_SETUP_ATTEMPTS:-60}

# Run "$@" until it succeeds, 2 s between tries, up to $attempts, while its error contains
# $1 (a state that passes by itself); any other error stops the job at once, shown as it is.
retrying() {
  passing=$1
  shift
  tries=1
  until out=$("$@" 2>&1); do
    case $out in
      *"$passing"*) ;;
      *) echo "$out" >&2; return 1 ;;
    esac
    if [ "$tries" -ge "$attempts" ]; then
      echo "$*: gave up after $tries tries: $out" >&2
      return 1
    fi
    tries=$((tries + 1))
    sleep 2
  done
  echo "$out"
}

# The server's port opens (its compose healthcheck) before its frontend serves.
retrying "" temporal operator cluster health --address "$address"

# Created only when the server says it is not found; any other failure is reported as it is.
if described=$(temporal operator namespace describe -n "$namespace" --address "$address" 2>&1); then
  echo "namespace $namespace exists"
else
  case $described in
    *"is not found"*) temporal operator namespace create -n "$namespace" --address "$address" ;;
    *) echo "$described" >&2; exit 1 ;;
  esac
fi

# A namespace just created reaches the server's namespace cache seconds later: until then its
# search attributes are refused with "not found". One that exists with this type is kept (the
# CLI and the server skip it); one of another type stops the job, as does any other error.
for name in TaskType DocumentId Owner; do
  retrying "is not found" temporal operator search-attribute create --namespace "$namespace" \
    --address "$address" --name "$name" --type Keyword
done
echo "namespace $namespace is ready"
