'use strict';
// A stdio MCP server in Node.js with no dependency, for the egress proxy's tests: tool `fetch` reads a URL with
// Node's own fetch(), tool `get` with the http/https module, as npm servers do. Newline-delimited JSON-RPC.
const http = require('node:http');
const https = require('node:https');
const readline = require('node:readline');

function get(url) {
  return new Promise((resolve, reject) => {
    const client = url.startsWith('https:') ? https : http;
    client
      .get(url, (response) => {
        let body = '';
        response.on('data', (chunk) => (body += chunk));
        response.on('end', () => resolve(`${response.statusCode} ${body}`));
      })
      .on('error', reject);
  });
}

const tools = {
  fetch: async (url) => {
    const response = await fetch(url);
    return `${response.status} ${await response.text()}`;
  },
  get,
};

function reason(error) {
  while (error && error.cause) error = error.cause; // fetch() wraps the connection's error
  return String(error && error.message ? error.message : error);
}

async function answer(message) {
  const { id, method, params } = message;
  if (method === 'initialize') {
    return {
      protocolVersion: params.protocolVersion,
      capabilities: { tools: {} },
      serverInfo: { name: 'node-fetch-probe', version: '1.0.0' },
    };
  }
  if (method === 'tools/list') {
    const schema = { type: 'object', properties: { url: { type: 'string' } }, required: ['url'] };
    return {
      tools: Object.keys(tools).map((name) => ({ name, description: `Read a URL with ${name}`, inputSchema: schema })),
    };
  }
  if (method === 'tools/call') {
    try {
      const text = await tools[params.name](params.arguments.url);
      return { content: [{ type: 'text', text }], isError: false };
    } catch (error) {
      return { content: [{ type: 'text', text: `failed: ${reason(error)}` }], isError: true };
    }
  }
  if (method === 'ping') return {};
  throw Object.assign(new Error(`no method ${method}`), { code: -32601, id });
}

readline.createInterface({ input: process.stdin }).on('line', async (line) => {
  const message = JSON.parse(line);
  if (message.id === undefined) return; // a notification
  try {
    const result = await answer(message);
    process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: message.id, result }) + '\n');
  } catch (error) {
    const failure = { code: error.code || -32603, message: error.message };
    process.stdout.write(JSON.stringify({ jsonrpc: '2.0', id: message.id, error: failure }) + '\n');
  }
});
