// Causally consistent sessions of the current Node.js driver through two routers: a session
// writes through router A; a session on router B takes A's clusterTime and operationTime
// (advanceClusterTime / advanceOperationTime) and must read the write, the driver sending
// readConcern {afterClusterTime}. Every reply seen carries operationTime.
// Usage: node causal.js <uriA> <uriB> <db>. Prints JSON results.
const { MongoClient } = require('mongodb');

async function main() {
  const opts = { serverSelectionTimeoutMS: 5000, monitorCommands: true };
  const a = new MongoClient(process.argv[2], opts);
  const b = new MongoClient(process.argv[3], opts);
  const out = { sent: [], replies: 0, withOpTime: 0 };
  for (const client of [a, b]) {
    client.on('commandSucceeded', (e) => {
      if (e.commandName === 'endSessions') return;
      out.replies += 1;
      if (e.reply && e.reply.operationTime) out.withOpTime += 1;
    });
  }
  b.on('commandStarted', (e) => {
    if (e.commandName === 'find' || e.commandName === 'aggregate') {
      out.sent.push(e.command.readConcern || null);
    }
  });
  await a.connect();
  await b.connect();
  const ca = a.db(process.argv[4]).collection('c');
  const cb = b.db(process.argv[4]).collection('c');
  const sa = a.startSession({ causalConsistency: true });
  const sb = b.startSession({ causalConsistency: true });
  try {
    await ca.insertOne({ _id: 'n1', x: -3, v: 1 }, { session: sa });
    await ca.updateOne({ _id: 'n1', x: -3 }, { $inc: { v: 1 } }, { session: sa });
    await ca.insertOne({ _id: 'n2', x: 3, v: 2 }, { session: sa });
    out.writeTime = sa.operationTime.toString();
    sb.advanceClusterTime(sa.clusterTime);
    sb.advanceOperationTime(sa.operationTime);
    out.read = (await cb.find({ v: 2 }, { session: sb }).sort({ _id: 1 }).toArray())
      .map((d) => d._id);
    out.count = await cb.countDocuments({ v: 2 }, { session: sb });
    out.afterClusterTime = out.sent.length && out.sent[0] && out.sent[0].afterClusterTime
      ? out.sent[0].afterClusterTime.toString() : null;
    try {
      await b.db(process.argv[4]).command({
        find: 'c', readConcern: { level: 'available', afterClusterTime: sa.operationTime },
      });
      out.refused = null;
    } catch (e) {
      out.refused = e.code;
    }
  } finally {
    await sa.endSession();
    await sb.endSession();
  }
  console.log(JSON.stringify(out));
  await a.close();
  await b.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
