// The Node.js driver's spellings for issue 20's second round: collation on update operators
// ($addToSet, arrayFilters) and set operators, '$'-prefixed field names in insertOne and
// replaceOne (the driver does not check keys), createIndex with text keys and options, and
// $text with {$meta: 'textScore'} in find's projection and sort.
// Usage: node query_gaps2.js <uri> [sharded]. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const db = client.db('nodegaps2');
  await db.dropDatabase();
  if (process.argv[3] === 'sharded') {
    const admin = client.db('admin');
    await admin.command({ enableSharding: 'nodegaps2', primaryShard: 'shard0' });
    await admin.command({ shardCollection: 'nodegaps2.c', key: { _id: 1 } });
    await admin.command({ split: 'nodegaps2.c', middle: { _id: 10 } });
    await admin.command({ moveChunk: 'nodegaps2.c', find: { _id: 10 }, to: 'shard1' });
  }
  const ci = { locale: 'en', strength: 2 };
  const c = db.collection('c');
  const out = {};
  await c.insertMany([{ _id: 1, a: ['Apple'], e: [{ k: 'X', v: 0 }] }, { _id: 11, a: ['x'] }]);
  await c.updateOne({ _id: 1 }, { $addToSet: { a: 'APPLE' } }, { collation: ci });
  await c.updateOne({ _id: 1 }, { $set: { 'e.$[m].v': 1 } },
    { collation: ci, arrayFilters: [{ 'm.k': 'x' }] });
  const d1 = await c.findOne({ _id: 1 });
  out.addToSet = d1.a;
  out.arrayFilter = d1.e[0].v;
  out.setUnion = (await c.aggregate([{ $match: { _id: 11 } },
    { $project: { u: { $setUnion: [['a', 'B'], ['A', 'b']] } } }], { collation: ci })
    .toArray())[0].u.length;
  // '$'-prefixed and dotted names.
  await c.insertOne({ _id: 2, $price: 5, 'a.b': 1, n: { $db: 'x' } });
  out.dollarDoc = await c.findOne({ _id: 2 });
  try {
    await c.replaceOne({ _id: 2 }, { x: 1, $bad: 1 });
    out.replaceCode = 0;
  } catch (e) {
    out.replaceCode = e.code;
  }
  out.getField = (await c.aggregate([{ $match: { _id: 2 } },
    { $project: { p: { $getField: { $literal: '$price' } } } }]).toArray())[0].p;
  // Text indexes.
  out.textName = await c.createIndex({ title: 'text', body: 'text' },
    { weights: { title: 5 }, default_language: 'spanish' });
  const spec = (await c.listIndexes().toArray()).find((i) => i.name === out.textName);
  out.textSpec = { key: spec.key, weights: spec.weights, lang: spec.default_language,
    version: spec.textIndexVersion };
  try {
    await c.createIndex({ other: 'text' });
    out.secondTextCode = 0;
  } catch (e) {
    out.secondTextCode = e.code;
  }
  // $text with the score in the projection and the sort (both shards hold a match).
  await c.insertMany([{ _id: 3, title: 'gato' }, { _id: 12, body: 'gato gato perro' }]);
  out.textScores = (await c.find({ $text: { $search: 'gatos' } },
    { projection: { score: { $meta: 'textScore' } } })
    .sort({ score: { $meta: 'textScore' } }).toArray()).map((d) => [d._id, d.score]);
  await client.close();
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
