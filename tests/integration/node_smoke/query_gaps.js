// The current Node.js driver's spellings of issue 20's query options (min/max/hint,
// returnKey, showRecordId, `let` on find/update/delete/findOneAndUpdate/aggregate) and of
// '$'-prefixed field names, against a node or a router. Usage: node query_gaps.js <uri>
// [sharded]. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const db = client.db('nodeqg');
  await db.dropDatabase();
  if (process.argv[3] === 'sharded') {
    const admin = client.db('admin');
    await admin.command({ enableSharding: 'nodeqg', primaryShard: 'shard0' });
    await admin.command({ shardCollection: 'nodeqg.c', key: { sk: 1 } });
    await admin.command({ split: 'nodeqg.c', middle: { sk: 50 } });
    await admin.command({ moveChunk: 'nodeqg.c', find: { sk: 60 }, to: 'shard1' });
  }
  const c = db.collection('c');
  await c.createIndex({ a: 1 });
  const docs = [];
  for (let i = 0; i < 10; i++) docs.push({ _id: i, sk: i * 10, a: i % 5 });
  await c.insertMany(docs);
  const out = {};
  out.minMax = (await c.find({}, { hint: { a: 1 }, min: { a: 1 }, max: { a: 3 } })
    .toArray()).map((d) => d._id).sort((x, y) => x - y);
  out.returnKey = await c.find({ a: 4 }, { hint: { a: 1 }, returnKey: true }).toArray();
  out.showRecordId = (await c.find({ _id: 1 }, { showRecordId: true }).toArray())
    .map((d) => typeof d.$recordId);
  out.findLet = (await c.find({ $expr: { $eq: ['$a', '$$v'] } }, { let: { v: 2 } })
    .toArray()).map((d) => d._id).sort((x, y) => x - y);
  out.updateLet = (await c.updateMany({ $expr: { $eq: ['$a', '$$v'] } },
    [{ $set: { t: '$$tag' } }], { let: { v: 3, tag: 'x' } })).modifiedCount;
  out.famLet = (await c.findOneAndUpdate({ sk: 40, $expr: { $eq: ['$_id', '$$id'] } },
    { $set: { f: 1 } }, { let: { id: 4 }, returnDocument: 'after' }));
  out.aggLet = await c.aggregate([{ $match: { $expr: { $eq: ['$_id', '$$id'] } } },
    { $project: { _id: 1, v: '$$v' } }], { let: { id: 5, v: 'five' } }).toArray();
  out.deleteLet = (await c.deleteMany({ $expr: { $eq: ['$a', '$$v'] } },
    { let: { v: 0 } })).deletedCount;
  await c.insertOne({ _id: 100, sk: 5, $price: 3, n: { $q: 1 } });
  out.dollar = await c.findOne({ _id: 100 });
  out.getField = await c.aggregate([{ $match: { _id: 100 } },
    { $project: { p: { $getField: { $literal: '$price' } } } }]).toArray();
  await client.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
