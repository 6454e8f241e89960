// Validates Prometheus Operator objects with the schemas of the npm package
// @kubernetes-models/prometheus-operator (generated from the operator's CRDs).
// usage: node validate-crds.mjs NODE_PREFIX OBJECTS.json
// OBJECTS.json: [{"source": "file.yaml", "object": {...}}, ...]. Exit 1 on any failure.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [prefix, file] = process.argv.slice(2);
const models = join(prefix, "node_modules", "@kubernetes-models", "prometheus-operator");
const entries = JSON.parse(readFileSync(file, "utf8"));
let failed = 0;
for (const { source, object } of entries) {
  const [group, version] = String(object.apiVersion).split("/");
  const name = `${source}: ${object.kind} ${object.metadata?.name}`;
  let Model;
  try {
    const mod = await import(pathToFileURL(join(models, group, version, `${object.kind}.js`)).href);
    Model = mod[object.kind];
  } catch (e) {
    console.log(`FAIL ${name}: no schema for ${object.apiVersion} ${object.kind} (${e.message})`);
    failed++;
    continue;
  }
  try {
    new Model(object).validate();
    console.log(`ok   ${name} (@kubernetes-models/prometheus-operator)`);
  } catch (e) {
    console.log(`FAIL ${name}: ${e.message}`);
    failed++;
  }
}
process.exit(failed ? 1 : 0);
