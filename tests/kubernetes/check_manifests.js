// node check_manifests.js PATH...: every Kubernetes document in PATH (a YAML
// file, a directory of them, or - for stdin) against the schemas of the npm
// package kubernetes-models, offline. In a directory, kustomization.yaml and
// the patches it names are skipped: they are not objects on their own (render
// them with kubectl kustomize and pass the output on stdin). Exit 1 when a
// document fails, naming the file, the kind and the field.
// Not caught (the schemas allow any extra property): misspelled field names.
const fs = require("fs");
const path = require("path");
const yaml = require("js-yaml");
const groups = {
  v1: require("kubernetes-models/v1"),
  "apps/v1": require("kubernetes-models/apps/v1"),
  "batch/v1": require("kubernetes-models/batch/v1"),
};

function filesOf(arg) {
  if (arg === "-" || !fs.statSync(arg).isDirectory()) return [arg];
  const names = fs.readdirSync(arg).filter((n) => /\.ya?ml$/.test(n));
  const skip = new Set(["kustomization.yaml", "kustomization.yml"]);
  for (const k of names.filter((n) => skip.has(n)))
    for (const p of yaml.load(fs.readFileSync(path.join(arg, k), "utf8")).patches || [])
      if (p.path) skip.add(p.path);
  return names.filter((n) => !skip.has(n)).map((n) => path.join(arg, n));
}

let failed = 0;
let passed = 0;
for (const file of process.argv.slice(2).flatMap(filesOf)) {
  const text = fs.readFileSync(file === "-" ? 0 : file, "utf8");
  const label = file === "-" ? "(stdin)" : file;
  for (const doc of yaml.loadAll(text)) {
    if (!doc) continue;
    const Kind = groups[doc.apiVersion] && groups[doc.apiVersion][doc.kind];
    const name = `${doc.kind} ${doc.metadata && doc.metadata.name}`;
    try {
      if (!Kind) throw new Error(`no schema for apiVersion ${doc.apiVersion} kind ${doc.kind}`);
      new Kind(doc).validate();
      console.log(`ok ${label}: ${name}`);
      passed++;
    } catch (e) {
      console.log(`FAIL ${label}: ${name}: ${e.message}`);
      failed++;
    }
  }
}
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed || !passed ? 1 : 0);
