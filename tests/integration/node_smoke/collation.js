// The current Node.js driver's spellings of collations (issue 20 item 1): the `collation`
// option of createCollection, createIndex, find, countDocuments, distinct, aggregate,
// updateMany, findOneAndUpdate and deleteMany, against a node or a router. Usage:
// node collation.js <uri> [sharded]. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const db = client.db('nodecoll');
  await db.dropDatabase();
  const ci = { locale: 'en', strength: 2 };
  if (process.argv[3] === 'sharded') {
    const admin = client.db('admin');
    await admin.command({ enableSharding: 'nodecoll', primaryShard: 'shard0' });
    await admin.command({ shardCollection: 'nodecoll.c', key: { sk: 1 } });
    await admin.command({ split: 'nodecoll.c', middle: { sk: '_' } });
    await admin.command({ moveChunk: 'nodecoll.c', find: { sk: 'z' }, to: 'shard1' });
  }
  const c = db.collection('c');
  await c.createIndex({ w: 1 }, { name: 'w_ci', collation: ci });
  const words = ['apple', 'Apple', 'APPLE', 'banana', 'Banana', '10', '9'];
  await c.insertMany(words.map((w, i) => ({ _id: i, sk: w, w })));
  const out = {};
  out.find = (await c.find({ w: 'APPLE' }, { collation: ci }).toArray()).map((d) => d._id)
    .sort();
  out.sorted = (await c.find({ w: { $in: ['9', '10'] } })
    .sort({ w: 1 }).collation({ locale: 'en', numericOrdering: true }).toArray())
    .map((d) => d.w);
  out.count = await c.countDocuments({ sk: 'banana' }, { collation: ci });
  out.distinct = (await c.distinct('w', { w: /^[aA]/ }, { collation: ci })).length;
  out.groups = (await c.aggregate([{ $match: { w: { $in: ['apple', 'banana'] } } },
    { $group: { _id: '$w', n: { $sum: 1 } } }, { $sort: { n: -1 } }],
  { collation: ci }).toArray()).map((d) => d.n);
  out.updated = (await c.updateMany({ sk: 'APPLE' }, { $set: { u: 1 } },
    { collation: ci })).modifiedCount;
  out.fam = (await c.findOneAndUpdate({ sk: 'BANANA' }, { $set: { f: 1 } },
    { collation: ci, sort: { _id: 1 }, returnDocument: 'after' }));
  out.deleted = (await c.deleteMany({ sk: 'Apple' }, { collation: ci })).deletedCount;
  await db.createCollection('d', { collation: ci });
  const info = await db.listCollections({ name: 'd' }).toArray();
  out.defaultStrength = info[0].options.collation.strength;
  await db.collection('d').insertMany([{ x: 'Q' }, { x: 'q' }]);
  out.defaultCount = await db.collection('d').countDocuments({ x: 'q' });
  try {
    await c.find({}, { collation: { locale: 'en', strength: 9 } }).toArray();
    out.badCode = 0;
  } catch (e) {
    out.badCode = e.code;
  }
  await client.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
