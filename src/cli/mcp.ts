import type { Command } from 'commander';
import { connect, type ConnectionFlags } from './connection.ts';

/**
 * `baton mcp`: an MCP server on stdin/stdout for an agent host (Claude Code, any MCP client). It
 * acts through the HTTP API with the configured key, so an agent-scoped key sees only its scope.
 * stdout carries the protocol only; diagnostics go to stderr.
 */
export function registerMcpCommands(program: Command): void {
  program
    .command('mcp')
    .description('serve Baton as MCP tools over stdio (for Claude Code and other MCP clients)')
    .action(async (_o, cmd: Command) => {
      const o = cmd.optsWithGlobals() as ConnectionFlags;
      const client = connect(o, 'mcp');
      const [{ StdioServerTransport }, { createMcpServer }] = await Promise.all([
        import('@modelcontextprotocol/sdk/server/stdio.js'),
        import('../mcp/tools.ts'),
      ]);
      const server = createMcpServer(client);
      const transport = new StdioServerTransport();
      const closed = new Promise<void>((resolve) => {
        transport.onclose = () => resolve();
        process.stdin.once('end', () => resolve());
      });
      await server.connect(transport);
      process.stderr.write(`baton mcp: serving ${client.server} over stdio\n`);
      await closed;
      await server.close();
    });
}
