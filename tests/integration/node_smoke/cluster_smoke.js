// Smoke test through a router: the current Node.js driver sees a sharded topology and
// runs everyday CRUD, aggregation and admin commands on a sharded collection.
// Usage: node cluster_smoke.js <router uri>. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const out = {};
  out.topology = client.topology.description.type;
  const admin = client.db('admin');
  await admin.command({ enableSharding: 'nodesmoke' });
  await admin.command({ shardCollection: 'nodesmoke.c', key: { k: 'hashed' } });
  const c = client.db('nodesmoke').collection('c');
  const docs = [];
  for (let i = 0; i < 1000; i++) docs.push({ _id: i, k: i, g: i % 10 });
  out.inserted = (await c.insertMany(docs, { ordered: false })).insertedCount;
  out.count = await c.countDocuments({ g: 3 });
  out.estimated = await c.estimatedDocumentCount();
  out.top = await c.find({ g: { $lt: 5 } }).sort({ k: -1 }).skip(2).limit(3).toArray();
  out.groups = await c.aggregate([
    { $group: { _id: '$g', n: { $sum: 1 }, avg: { $avg: '$k' } } }, { $sort: { _id: 1 } },
  ]).toArray();
  out.updated = (await c.updateMany({ g: 1 }, { $set: { tagged: true } })).modifiedCount;
  out.byKey = await c.findOne({ k: 42 });
  out.deleted = (await c.deleteOne({ k: 7 })).deletedCount;
  out.distinct = (await c.distinct('g')).length;
  const cursor = c.find({}).batchSize(100);
  let n = 0;
  for await (const _ of cursor) n++; // eslint-disable-line no-unused-vars
  out.iterated = n;
  out.shards = (await admin.command({ listShards: 1 })).shards.length;
  await client.db('nodesmoke').dropDatabase();
  await client.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
