// Snapshot sessions of the current Node.js driver (client.startSession({snapshot: true})):
// the first read sends readConcern {level: "snapshot"}, the driver takes atClusterTime from
// the reply (cursor.atClusterTime, or distinct's atClusterTime) and sends it with every later
// read of the session, which must then see the data as of that time.
// Usage: node snapshot.js <uri> <db>. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const out = {};
  const c = client.db(process.argv[3]).collection('c');
  const docs = [];
  for (let i = 0; i < 200; i++) docs.push({ _id: i, k: i, v: 0 });
  await c.insertMany(docs);
  const session = client.startSession({ snapshot: true });
  try {
    out.first = (await c.find({ k: { $lt: 10 } }, { session }).toArray()).map((d) => d.v);
    out.atClusterTime = session.snapshotTime ? session.snapshotTime.toString() : null;
    // Tell the test the session's time and wait for its go (it may prepare the shards).
    const t = session.snapshotTime;
    console.log(JSON.stringify({ t: t ? t.high : null, i: t ? t.low : null }));
    await new Promise((resolve) => process.stdin.once('data', resolve));
    process.stdin.pause();
    // Writes outside the session after its snapshot time.
    await c.updateMany({}, { $set: { v: 1 } });
    await c.deleteMany({ k: { $gte: 150 } });
    out.later = (await c.find({}, { session }).batchSize(50).toArray()).map((d) => d.v);
    out.agg = await c.aggregate([{ $group: { _id: '$v', n: { $sum: 1 } } }], { session })
      .toArray();
    out.distinct = await c.distinct('v', {}, { session });
    out.now = (await c.find({}).toArray()).map((d) => d.v);
  } finally {
    await session.endSession();
  }
  console.log(JSON.stringify(out));
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
