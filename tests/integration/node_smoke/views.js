// The current Node.js driver's spellings of views (issue 20 item 3): createCollection with
// viewOn/pipeline, reads (find, countDocuments, distinct, aggregate), listCollections of type
// view, a refused write and dropping the view, against a node or a router. Usage:
// node views.js <uri> [sharded]. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const db = client.db('nodeviews');
  await db.dropDatabase();
  if (process.argv[3] === 'sharded') {
    const admin = client.db('admin');
    await admin.command({ enableSharding: 'nodeviews', primaryShard: 'shard0' });
    await admin.command({ shardCollection: 'nodeviews.c', key: { sk: 1 } });
    await admin.command({ split: 'nodeviews.c', middle: { sk: 50 } });
    await admin.command({ moveChunk: 'nodeviews.c', find: { sk: 60 }, to: 'shard1' });
  }
  const c = db.collection('c');
  const docs = [];
  for (let i = 0; i < 10; i++) docs.push({ _id: i, sk: i * 10, a: i % 3 });
  await c.insertMany(docs);
  const v = await db.createCollection('v', {
    viewOn: 'c', pipeline: [{ $match: { a: { $gt: 0 } } }, { $project: { sk: 0 } }],
  });
  const out = {};
  out.find = (await v.find({ a: 2 }).sort({ _id: 1 }).toArray());
  out.batches = (await v.find({}, { batchSize: 2 }).toArray()).length;
  out.count = await v.countDocuments({ a: 1 });
  out.distinct = (await v.distinct('a')).sort();
  out.agg = await v.aggregate([{ $group: { _id: null, n: { $sum: 1 } } }]).toArray();
  out.list = (await db.listCollections({ type: 'view' }).toArray())
    .map((x) => ({ name: x.name, viewOn: x.options.viewOn }));
  try {
    await v.insertOne({ _id: 99 });
    out.insert = 'accepted';
  } catch (e) {
    out.insert = e.code;
  }
  out.dropped = await v.drop();
  out.after = (await db.listCollections({ type: 'view' }).toArray()).length;
  await client.close();
  process.stdout.write(JSON.stringify(out));
}

main().catch((e) => { process.stderr.write(String(e.stack || e)); process.exit(1); });
