// Smoke test: the current Node.js MongoDB driver connects to Shale, completes its
// handshake and runs commands. Usage: node smoke.js <uri>. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const admin = client.db('admin');
  const out = {};
  out.ping = await admin.command({ ping: 1 });
  out.hello = await admin.command({ hello: 1 });
  out.buildInfo = await admin.command({ buildInfo: 1 });
  try {
    await admin.command({ noSuchCommand: 1 });
  } catch (e) {
    out.unknownCode = e.code;
  }
  await client.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
