// node check_manifests.js FILE...: validates every Kubernetes document in
// the files against the schemas of kubernetes-models (offline); exit 1 when
// one fails, naming the file, the kind and the field.
const fs = require("fs");
const yaml = require("js-yaml");
const groups = {
  v1: require("kubernetes-models/v1"),
  "apps/v1": require("kubernetes-models/apps/v1"),
  "batch/v1": require("kubernetes-models/batch/v1"),
};
let failed = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of yaml.loadAll(fs.readFileSync(file, "utf8"))) {
    if (!doc || doc.kind === "Kustomization") continue;
    const Kind = groups[doc.apiVersion] && groups[doc.apiVersion][doc.kind];
    if (!Kind) {
      console.log(`FAIL ${file}: no schema for ${doc.apiVersion} ${doc.kind}`);
      failed++;
      continue;
    }
    try {
      new Kind(doc).validate();
      console.log(`ok ${file}: ${doc.kind} ${doc.metadata.name}`);
    } catch (e) {
      console.log(`FAIL ${file}: ${doc.kind}: ${e.message}`);
      failed++;
    }
  }
}
process.exit(failed ? 1 : 0);
