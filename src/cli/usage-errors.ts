import type { Command, CommanderError } from 'commander';
import { UsageError } from '../errors.js';

/**
 * Every parsing mistake becomes a UsageError of one line, after the command's name; commander's
 * message is reworded where it would span lines or not name the argument at fault.
 */
export function reportUsageErrors(command: Command, path: readonly string[]): void {
  command.configureOutput({ outputError: () => undefined });
  command.exitOverride((error) => {
    if (error.code === 'commander.help' || error.exitCode === 0) throw error;
    const where = path.length > 0 ? `${path.join(' ')}: ` : '';
    throw new UsageError(`${where}${usageMessage(command, error)}`);
  });
  for (const sub of command.commands) reportUsageErrors(sub, [...path, sub.name()]);
}

function usageMessage(command: Command, error: CommanderError): string {
  const [message = '', similar] = error.message.replace(/^error: /, '').split('\n(Did you mean ');
  const suggestion = similar?.replace(/\?\)$/, '');
  switch (error.code) {
    case 'commander.unknownCommand': {
      const hint = suggestion ? `did you mean '${suggestion}'? ` : '';
      return `unknown command ${JSON.stringify(command.args[0])}; ${hint}run 'perks-worker --help'`;
    }
    case 'commander.unknownOption':
      return `U${message.slice(1)}${suggestion ? `; did you mean ${suggestion}?` : ''}`;
    case 'commander.missingArgument':
      return `missing <${command.registeredArguments[command.args.length]?.name()}>`;
    case 'commander.excessArguments': {
      const extra = command.args.slice(command.registeredArguments.length).join(' ');
      return `unexpected argument ${JSON.stringify(extra)}`;
    }
    case 'commander.missingMandatoryOptionValue':
      return message.replace(/^required option '(.+)' not specified$/, '$1 is required');
    case 'commander.invalidArgument':
      // "option '--limit <n>' argument '0' is invalid. must be ...": the flag, then the reason.
      return message.replace(
        /^option '(?:-\w, )?(--[\w-]+)[^']*' argument '.*' is invalid\. /s,
        '$1 ',
      );
    default:
      return message;
  }
}
