// Change streams with the Node.js driver through a router: watch() on a collection sees an
// insert, an update (with its description) and a delete in order, and a stream resumed from
// the first event's token starts at the second; with changeStreamPreAndPostImages a
// fullDocumentBeforeChange: 'required' stream gets the pre-image of an update (kept in
// config.system.preimages). Usage: node change_streams.js <uri>.
const { MongoClient } = require('mongodb');

async function nextEvent(stream) {
  for (let i = 0; i < 100; i++) {
    const ev = await stream.tryNext();
    if (ev) return ev;
  }
  throw new Error('no change event');
}

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const coll = client.db('csnode').collection('c');
  const out = {};
  const stream = coll.watch([], { maxAwaitTimeMS: 200 });
  await stream.tryNext(); // opens the stream before the writes
  await coll.insertOne({ _id: 1, a: 1 });
  await coll.updateOne({ _id: 1 }, { $set: { a: 2 } });
  await coll.deleteOne({ _id: 1 });
  const evs = [await nextEvent(stream), await nextEvent(stream), await nextEvent(stream)];
  out.types = evs.map((e) => e.operationType);
  out.updated = evs[1].updateDescription.updatedFields;
  await stream.close();
  const resumed = coll.watch([], { resumeAfter: evs[0]._id, maxAwaitTimeMS: 200 });
  out.resumed = (await nextEvent(resumed)).operationType;
  await resumed.close();
  const db = client.db('csnode');
  await db.createCollection('pre', { changeStreamPreAndPostImages: { enabled: true } });
  const pre = db.collection('pre');
  await pre.insertOne({ _id: 1, v: 1 });
  const ps = pre.watch([], { fullDocumentBeforeChange: 'required', maxAwaitTimeMS: 200 });
  await ps.tryNext();
  await pre.updateOne({ _id: 1 }, { $set: { v: 2 } });
  const pev = await nextEvent(ps);
  out.preImage = pev.fullDocumentBeforeChange;
  await ps.close();
  await client.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
