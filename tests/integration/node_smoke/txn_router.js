// Transactions through a router with the Node.js driver's convenient API
// (session.withTransaction): transfers between a document on each shard, then one aborted
// by the callback's error. Usage: node txn_router.js <uri> <db>. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  await client.connect();
  const c = client.db(process.argv[3]).collection('acct');
  const out = { commits: 0 };
  const session = client.startSession();
  try {
    for (let i = 0; i < 5; i++) {
      await session.withTransaction(async () => {
        await c.updateOne({ x: -1 }, { $inc: { bal: -10 } }, { session });
        await c.updateOne({ x: 1 }, { $inc: { bal: 10 } }, { session });
      });
      out.commits++;
    }
    try {
      await session.withTransaction(async () => {
        await c.updateOne({ x: -1 }, { $inc: { bal: -1000 } }, { session });
        throw new Error('callback refuses');
      });
    } catch (e) {
      out.aborted = e.message;
    }
  } finally {
    await session.endSession();
  }
  out.bal = {};
  for (const d of await c.find({}).toArray()) out.bal[d._id] = d.bal;
  console.log(JSON.stringify(out));
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
