#!/bin/sh
# One-shot, once the server is healthy: the namespace and the search attributes knowledgeops
# sets on every task (the worker registers them too, if this has not run).
set -eu
address=${TEMPORAL_ADDRESS:-temporal:7233}
namespace=${TEMPORAL_NAMESPACE:-default}
until temporal operator cluster health --address "$address" >/dev/null 2>&1; do sleep 2; done
temporal operator namespace describe -n "$namespace" --address "$address" >/dev/null 2>&1 \
  || temporal operator namespace create -n "$namespace" --address "$address"
for name in TaskType DocumentId Owner; do
  temporal operator search-attribute create --namespace "$namespace" --address "$address" \
    --name "$name" --type Keyword 2>/dev/null || echo "search attribute $name exists"
done
echo "namespace $namespace is ready"
