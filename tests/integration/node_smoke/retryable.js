// Retryable writes with the current Node.js driver (retryWrites is on by default): each
// write meets a failure injected with failCommand on the process the driver talks to and
// is retried by the driver itself; the write must take effect exactly once.
// Usage: node retryable.js <uri> <failpoint uri>. The fail point is set through the second
// URI (the router for a cluster: its own failCommand) so it fires on the driver's process.
// Prints JSON results.
const { MongoClient } = require('mongodb');

async function failOnce(admin, data) {
  await admin.command({ configureFailPoint: 'failCommand', mode: { times: 1 }, data });
}

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 5000 });
  const fpClient = new MongoClient(process.argv[3], {
    serverSelectionTimeoutMS: 5000, directConnection: true,
  });
  await client.connect();
  await fpClient.connect();
  const fp = fpClient.db('admin');
  const coll = client.db('noderetry').collection('c');
  const out = {};
  await coll.insertOne({ _id: 'counter', n: 0 });

  // The connection closes before the write runs: the retry runs it.
  await failOnce(fp, { failCommands: ['insert'], closeConnection: true });
  await coll.insertOne({ _id: 'a' });
  // ShutdownInProgress (91) before the write runs, labelled RetryableWriteError: a data
  // node labels it itself; a router labels no error it did not cause by shutting down, so
  // (as drivers' own tests do for mongos) the fail point names the label.
  await failOnce(fp, {
    failCommands: ['update'], errorCode: 91, errorLabels: ['RetryableWriteError'],
  });
  await coll.updateOne({ _id: 'counter' }, { $inc: { n: 1 } });
  // After the write ran: a writeConcernError with the label. The retry is answered from
  // the session's history and must not increment again.
  await failOnce(fp, {
    failCommands: ['update'],
    writeConcernError: { code: 91, errmsg: 'Replication is being shut down' },
    errorLabels: ['RetryableWriteError'],
  });
  await coll.updateOne({ _id: 'counter' }, { $inc: { n: 1 } });
  await failOnce(fp, {
    failCommands: ['findAndModify'],
    writeConcernError: { code: 189, errmsg: 'Primary stepped down' },
    errorLabels: ['RetryableWriteError'],
  });
  const before = await coll.findOneAndUpdate({ _id: 'counter' }, { $inc: { n: 1 } },
    { returnDocument: 'before', includeResultMetadata: false });
  out.fam_before = before.n;
  await failOnce(fp, {
    failCommands: ['delete'],
    writeConcernError: { code: 91, errmsg: 'Replication is being shut down' },
    errorLabels: ['RetryableWriteError'],
  });
  out.deleted = (await coll.deleteOne({ _id: 'a' })).deletedCount;
  await failOnce(fp, {
    failCommands: ['insert'],
    writeConcernError: { code: 91, errmsg: 'Replication is being shut down' },
    errorLabels: ['RetryableWriteError'],
  });
  out.inserted = (await coll.insertMany([{ _id: 'b' }, { _id: 'c' }])).insertedCount;

  out.counter = (await coll.findOne({ _id: 'counter' })).n;
  out.ids = (await coll.find({}).sort({ _id: 1 }).toArray()).map((d) => d._id);
  await fp.command({ configureFailPoint: 'failCommand', mode: 'off' });
  await client.db('noderetry').dropDatabase();
  await client.close();
  await fpClient.close();
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
