// Lint for bugs the type checker cannot see: promises nobody awaits or handles. Style is
// Prettier's (see .prettierrc.json), so no stylistic rule belongs here.
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    files: ['src/**/*.ts', 'web/src/**/*.{ts,tsx}'],
    languageOptions: {
      parser: tseslint.parser,
      // Type information from the nearest tsconfig.json (the root one, or web/tsconfig.json).
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    plugins: { '@typescript-eslint': tseslint.plugin },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // A promise started and dropped loses its rejection: an unhandled rejection at best, a
      // swallowed failure at worst. Handle it (await, .catch that logs or counts) or say why not.
      '@typescript-eslint/no-floating-promises': 'error',
      // An async function where a void callback is expected (an event listener, a timer,
      // forEach) drops its promise the same way.
      '@typescript-eslint/no-misused-promises': 'error',
      // Awaiting a value that is not a promise usually means a wrong type or a missing call.
      '@typescript-eslint/await-thenable': 'error',
    },
  },
  {
    // React drops what an event handler returns, and the dashboard's async handlers catch their
    // own failures to show them (a form's "Not started: …"), so an async handler is allowed there.
    files: ['web/src/**/*.tsx'],
    rules: { '@typescript-eslint/no-misused-promises': ['error', { checksVoidReturn: { attributes: false } }] },
  },
  {
    // Time comes from one clock: whatever the engine and the services beside it store or compare
    // with a stored time reads engine.now() (or store.now(), a Canary's or Pruner's clock), the
    // database server's on PostgreSQL; a duration or a local wait reads performance.now().
    files: ['src/engine/**/*.ts', 'src/delivery/**/*.ts', 'src/canary/**/*.ts', 'src/retention/**/*.ts', 'src/auth/**/*.ts'],
    rules: {
      'no-restricted-properties': [
        'error',
        {
          object: 'Date',
          property: 'now',
          message: "Stored times come from the store's clock (engine.now(), store.now()); durations from performance.now().",
        },
      ],
      'no-restricted-syntax': [
        'error',
        {
          selector: "NewExpression[callee.name='Date'][arguments.length=0]",
          message: "Stored times come from the store's clock: new Date(engine.now()), not new Date().",
        },
      ],
    },
  },
  {
    // The half of .dependency-cruiser.cjs's routes-skip-the-store that imports cannot show: a
    // route reaching the store through the engine object.
    files: ['src/api/**/*.ts', 'src/mcp/**/*.ts'],
    rules: {
      'no-restricted-syntax': [
        'error',
        {
          selector: "MemberExpression[property.name='store']",
          message:
            'Routes and MCP tools call the Engine facade (engine.logs, engine.idempotency, engine.subscribe, …) or a service, never the store.',
        },
      ],
    },
  },
);
