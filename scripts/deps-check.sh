#!/usr/bin/env bash
# Keeps the import layers (the house style's "small packages, a pure
# core"; the rules are stated here, this script is their only home): algo
# imports only the standard library; store imports only algo; policy (the
# pure policy model) imports only algo and the standard library; backends
# never import each other; the store guard (store/guard) imports only
# store, algo, policy and promshare, and the engine may import it; quota,
# fairq and the config loader depend on policy, never on the limiter
# engine, nor the config loader on the Envoy
# service (its types are internal/rlsconfig's, which imports only policy
# and algo); the policy file decoder (policy/*) imports only policy and
# algo; metric registration (promshare) imports nothing of the module; the
# header formats (limitheader) only limiter and algo; grpclimit uses them
# without the HTTP middleware (httplimit); no public package (anything
# outside internal/ and cmd/) imports internal/. Test files are not
# checked. Last, what httplimit and grpclimit link (all their
# dependencies, not only their imports).
set -euo pipefail
mod=$(go list -m)
fail=0
while read -r pkg imports; do
  rel=${pkg#"$mod"}; rel=${rel#/}
  for imp in $imports; do
    case "$imp" in "$mod"*) ;; *) 
      # A non-module import: only algo is held to the standard library.
      if [[ "$rel" = algo || "$rel" = policy ]] && [[ "$imp" == *.*/* ]]; then echo "deps-check: $rel imports $imp (standard library only)"; fail=1; fi
      continue ;;
    esac
    irel=${imp#"$mod"/}
    case "$rel" in
      algo) echo "deps-check: algo imports $irel"; fail=1 ;;
      store) [ "$irel" = algo ] || { echo "deps-check: store imports $irel (only algo)"; fail=1; } ;;
      policy) [ "$irel" = algo ] || { echo "deps-check: policy imports $irel (only algo: it is pure)"; fail=1; } ;;
      policy/*) [[ "$irel" == policy || "$irel" == algo ]] || { echo "deps-check: $rel imports $irel (only policy and algo)"; fail=1; } ;;
      promshare) echo "deps-check: promshare imports $irel (nothing of the module)"; fail=1 ;;
      limitheader) [[ "$irel" == limiter || "$irel" == algo ]] || { echo "deps-check: limitheader imports $irel (only limiter and algo: HTTP and gRPC share it)"; fail=1; } ;;
      grpclimit) [[ "$irel" == httplimit || "$irel" == httplimit/* ]] && { echo "deps-check: grpclimit imports $irel (it shares only limitheader with the HTTP middleware)"; fail=1; } ;;
      quota|quota/*|fairq|fairq/*) [[ "$irel" == limiter || "$irel" == limiter/* ]] && { echo "deps-check: $rel imports $irel (it needs policy, not the engine)"; fail=1; } ;;
      internal/config) [[ "$irel" == limiter || "$irel" == limiter/* || "$irel" == internal/rls ]] && { echo "deps-check: $rel imports $irel (it needs policy and internal/rlsconfig, not the engine or the gRPC service)"; fail=1; } ;;
      internal/rlsconfig) [[ "$irel" == policy || "$irel" == algo ]] || { echo "deps-check: $rel imports $irel (only policy and algo: it is types)"; fail=1; } ;;
      store/memstore) [[ "$irel" == store/redisstore* ]] && { echo "deps-check: memstore imports $irel"; fail=1; } ;;
      store/redisstore) [[ "$irel" == store/memstore* ]] && { echo "deps-check: redisstore imports $irel"; fail=1; } ;;
      limiter|limiter/*) [[ "$irel" == store/?* && "$irel" != store/storetest && "$irel" != store/guard ]] && { echo "deps-check: $rel imports the backend $irel (the app wires backends)"; fail=1; } ;;
      store/guard) [[ "$irel" == store || "$irel" == algo || "$irel" == policy || "$irel" == promshare ]] || { echo "deps-check: store/guard imports $irel (only store, algo, policy and promshare: it guards any backend, wired by the app)"; fail=1; } ;;
    esac
    if [[ "$rel" != internal/* && "$rel" != cmd/* && "$irel" == internal/* ]]; then
      echo "deps-check: public package $rel imports $irel"; fail=1
    fi
  done
done < <(go list -f '{{.ImportPath}} {{join .Imports " "}}' ./...)
# What a library user links: httplimit with a policy built in Go links
# neither the YAML decoder nor the memory store (httplimit/pertenant does),
# and grpclimit links no HTTP middleware.
linked() { go list -deps "./$1" | grep -qx "$2"; }
for dep in go.yaml.in/yaml/v3 "$mod/store/memstore" "$mod/policy/policyfile"; do
  if linked httplimit "$dep"; then echo "deps-check: httplimit links $dep (file loading and defaults belong in httplimit/pertenant)"; fail=1; fi
done
if linked grpclimit "$mod/httplimit"; then echo "deps-check: grpclimit links httplimit (it shares only limitheader with it)"; fail=1; fi
[ $fail = 0 ] && echo "deps-check: ok"
exit $fail
