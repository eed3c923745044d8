# tools/gpu-tests/harness/bound_sass.awk: each bound kernel's instructions a
# pair, from the harness binary's SASS (run.sh, MODE=bound):
#
#   cuobjdump -sass build/harness | awk -f bound_sass.awk > bound-sass.csv
#
# A kernel's hot loop is its innermost loop (a backward branch with no other
# inside its range) holding the most MUFU.EX2; its pairs are those MUFUs
# times 32 / (32 - P), P of every 32 exponentials being polynomials. The
# key columns are the harness's CSV's (harness_bound.cu).
function hex(s,    v, i, c) {
  v = 0
  s = tolower(s)
  sub(/^0x/, "", s)
  for (i = 1; i <= length(s); i++) {
    c = index("0123456789abcdef", substr(s, i, 1))
    if (c == 0) break
    v = v * 16 + c - 1
  }
  return v
}
function template_arg(name, k,    rest, i, v) {
  # the k-th template argument of pair_bound<D, FORM, P, LEAN, SPREAD>
  rest = substr(name, index(name, "pair_boundI") + 11)
  for (i = 1; i <= k; i++) {
    sub(/^L[ib]/, "", rest)
    match(rest, /^[0-9]+/)
    v = substr(rest, 1, RLENGTH) + 0
    rest = substr(rest, RLENGTH + 2) # past the number and its E
  }
  return v
}
function report(    d, form, p, lean, spread, j, k, s, inner, best, best_mufu, best_n, mufu, n) {
  if (name == "" || n_ins == 0) return
  d = template_arg(name, 1); form = template_arg(name, 2); p = template_arg(name, 3)
  lean = template_arg(name, 4); spread = template_arg(name, 5)
  best_mufu = 0
  for (j = 1; j <= n_ins; j++) {
    if (target[j] == "" || target[j] > addr[j]) continue
    for (s = j; s > 1 && addr[s - 1] >= target[j]; s--) ;
    inner = 1
    for (k = s; k < j; k++) if (target[k] != "" && target[k] <= addr[k]) inner = 0
    if (!inner) continue
    mufu = 0; n = 0
    for (k = s; k <= j; k++) { n++; if (op[k] == "MUFU.EX2") mufu++ }
    if (mufu > best_mufu) { best_mufu = mufu; best_n = n }
  }
  if (best_mufu == 0) return
  printf "%s,%d,%s,%s,%d,%d,%.1f,%.3f\n",
    form == 0 ? "expanded" : form == 1 ? "difference" : "mma", d,
    lean ? "lean" : "poly_exp2", p == 0 ? "none" : spread ? "spread" : "last", p,
    best_n, best_mufu * 32 / (32 - p), best_n / (best_mufu * 32 / (32 - p))
}
BEGIN { print "form,d,polynomial,placement,poly_of_32,loop_instructions,loop_pairs,instructions_per_pair" }
/Function : / {
  report()
  name = index($0, "pair_boundI") ? $NF : ""
  n_ins = 0
  next
}
name != "" && /^[ \t]*\/\*[0-9a-f]+\*\/[ \t]+[@A-Z]/ {
  line = $0
  sub(/^[ \t]*\/\*/, "", line)
  a = hex(substr(line, 1, index(line, "*/") - 1))
  sub(/^[0-9a-f]+\*\/[ \t]+/, "", line)
  sub(/;.*/, "", line)
  nf = split(line, f, /[ \t,]+/)
  o = f[1] ~ /^@/ ? f[2] : f[1]
  if (o == "NOP") next
  n_ins++
  addr[n_ins] = a; op[n_ins] = o; target[n_ins] = ""
  if (o ~ /^BRA/) for (i = 2; i <= nf; i++) if (f[i] ~ /^0x[0-9a-f]+$/) target[n_ins] = hex(f[i])
}
END { report() }
