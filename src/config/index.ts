export { loadConfig } from './load.js';
export { type Config, ConfigError, type ConfigProblem, SETTINGS } from './schema.js';
