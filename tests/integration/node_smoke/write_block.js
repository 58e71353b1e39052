// User write blocking seen by the Node.js driver through a router. Usage:
// node write_block.js <router uri>. The caller has switched on the fail point that makes the
// router treat its clients as unprivileged. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const admin = client.db('admin');
  const coll = client.db('uwbnode').collection('c');
  const out = {};
  await coll.insertOne({ _id: 1 });
  await admin.command({ setUserWriteBlockMode: 1, global: true });
  try {
    await coll.insertOne({ _id: 2 });
    out.insert = 'ok';
  } catch (e) {
    out.insert = e.code;
    out.insertMsg = e.message;
  }
  try {
    await coll.findOneAndUpdate({ _id: 1 }, { $set: { x: 1 } });
    out.fam = 'ok';
  } catch (e) {
    out.fam = e.code;
  }
  out.read = await coll.countDocuments({});
  await admin.command({ setUserWriteBlockMode: 1, global: false });
  await coll.insertOne({ _id: 2 });
  out.after = await coll.countDocuments({});
  await client.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
